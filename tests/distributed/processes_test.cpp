// The collectives and data-parallel training across processes: ctest runs these tests under
// `kiln launch --nproc 3` (tests/CMakeLists.txt: distributed.processes), every rank the same
// tests in the same order; run any other way they skip.
#include <gtest/gtest.h>
#include <kiln/distributed.h>
#include <kiln/kiln.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "distributed/collective_checks.h"
#include "distributed/data_parallel_checks.h"
#include "support/error_message.h"

namespace kiln {
namespace {

using namespace std::chrono_literals;

#define KILN_LAUNCHED_GROUP(name)                                               \
  if (std::getenv("KILN_WORLD_SIZE") == nullptr)                                \
    GTEST_SKIP() << "run by `kiln launch` (ctest: distributed.processes)";      \
  if (!distributed::available()) GTEST_SKIP() << "kiln was built without Gloo"; \
  const ProcessGroup name = ProcessGroup::from_env(Device::cpu(), {.timeout = 60s})

TEST(DistributedProcesses, EveryCollectiveAndDtype) {
  KILN_LAUNCHED_GROUP(group);
  EXPECT_GE(group.size(), 2);
  EXPECT_EQ(group.backend_name(), "gloo");
  test::check_every_collective(group, Device::cpu());
}

TEST(DistributedProcesses, DataParallelTrainingEqualsOneProcess) {
  KILN_LAUNCHED_GROUP(group);
  const Device device = Device::cpu().autodiff();
  const Tensor<2> x = test::batch_features(device);
  const Tensor<1, Int> y = test::batch_labels(device);
  const auto expected = test::one_process_parameters(test::data_parallel_net(1, device), x, y);
  const train::DataParallel ddp(group, {.bucket_bytes = 200});
  test::expect_same_parameters(
      test::data_parallel_parameters(ddp, test::data_parallel_net(1 + group.rank(), device), x, y),
      expected, "rank " + std::to_string(group.rank()));
}

// A write to a peer that has gone must come back as EPIPE (and so a DistributedError), not end the
// rank with SIGPIPE: Gloo's sockets do not ask for MSG_NOSIGNAL.
TEST(DistributedProcesses, AWriteToAClosedPeerIsAnErrorNotASignal) {
  KILN_LAUNCHED_GROUP(group);
  group.barrier();  // no rank leaves (closing its connections) while another still connects
  int ends[2];
  ASSERT_EQ(pipe(ends), 0);
  close(ends[0]);
  const char byte = 'k';
  EXPECT_EQ(write(ends[1], &byte, 1), -1);
  EXPECT_EQ(errno, EPIPE);
  close(ends[1]);
}

// Last: it leaves its group broken.
TEST(DistributedProcesses, AMismatchIsADistributedErrorOnEveryRank) {
  KILN_LAUNCHED_GROUP(group);
  test::expect_error<DistributedError>(
      [&] { distributed::all_reduce(Tensor<1>::ones({2 + group.rank()}, Device::cpu()), group); },
      "all_reduce",
      {"the ranks called different collectives", "rank 0: #0 all_reduce(sum) f32 [2]",
       "rank 1: #0 all_reduce(sum) f32 [3]"});
}

// Last of all: the last rank leaves; the others' next collective fails at once, not after the
// timeout.
TEST(DistributedProcesses, ARankThatExitsIsADistributedErrorNotAHang) {
  KILN_LAUNCHED_GROUP(group);
  group.barrier();  // every connection is up before one goes away
  if (group.rank() == group.size() - 1) {
    std::fflush(stdout);
    std::_Exit(0);
  }
  const auto started = std::chrono::steady_clock::now();
  test::expect_error<DistributedError>(
      [&] { distributed::all_reduce(Tensor<1>::ones({8}, Device::cpu()), group); }, "all_reduce",
      {"did not answer"});
  EXPECT_LT(std::chrono::steady_clock::now() - started, 30s);
}

}  // namespace
}  // namespace kiln
