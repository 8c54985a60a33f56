// ProcessGroup's constructor; the factories (from_env, threads, single) are in libkiln_dist.
#include "kiln/process_group.h"

#include <atomic>

#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln {

ProcessGroup::ProcessGroup(std::shared_ptr<distributed::Communicator> communicator, Device device)
    : communicator_(std::move(communicator)), device_(device) {
  static std::atomic<std::uint64_t> next_id{1};
  if (!communicator_) detail::fail<InvalidArgument>("ProcessGroup", "the communicator is null");
  rank_ = communicator_->rank();
  size_ = communicator_->size();
  id_ = next_id.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace kiln
