// The collectives (ops.def's distributed group) on every device under test: two ranks of a
// thread group exchange tensors of every dtype (tests/distributed/collective_checks.h), or, where
// kiln was built without Gloo, a group of one process returns them.
#include <chrono>

#include "conformance/conformance.h"
#include "distributed/collective_checks.h"
#include "support/ranks.h"

namespace kiln::conformance {
namespace {

KILN_CONFORMANCE_ROW(collectives, ({"all_reduce", "broadcast_from", "all_gather", "reduce_scatter",
                                    "send", "recv"})) {
  if (!distributed::available()) {
    test::check_every_collective(ProcessGroup::single(device), device);
    return;
  }
  const auto groups =
      ProcessGroup::threads(2, device, DistributedOptions{std::chrono::seconds(30)});
  test::expect_no_errors(test::on_ranks(
      groups, [&](const ProcessGroup& group) { test::check_every_collective(group, device); }));
}

}  // namespace
}  // namespace kiln::conformance
