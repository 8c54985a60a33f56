#include "kiln/data/loader.h"

#include <limits>
#include <numeric>
#include <system_error>

#include "kiln/data/permutation.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::data::detail {

using kiln::detail::fail;

void fail_null_loader_argument(const char* what) {
  fail<InvalidArgument>("DataLoader", "the ", what, " is empty");
}

void check_loader_options(const DataLoaderOptions& options) {
  if (options.batch_size == 0) fail<InvalidArgument>("DataLoader", "batch_size must be positive");
  if (options.world_size == 0 || options.rank >= options.world_size) {
    fail<InvalidArgument>("DataLoader", "rank ", options.rank, " is not in [0, world_size ",
                          options.world_size, ")");
  }
  if (options.batch_size > std::numeric_limits<std::size_t>::max() / options.world_size) {
    fail<InvalidArgument>("DataLoader", "batch_size ", options.batch_size, " times world_size ",
                          options.world_size, " overflows");
  }
  if (options.num_workers > kMaxLoaderWorkers) {
    fail<InvalidArgument>("DataLoader", "num_workers ", options.num_workers, " exceeds ",
                          kMaxLoaderWorkers);
  }
}

std::size_t num_batches(std::size_t size, const DataLoaderOptions& options) {
  const std::size_t global = options.batch_size * options.world_size;
  const std::size_t full = size / global;
  const bool partial = size % global != 0;
  return full + (partial && !options.drop_last ? 1 : 0);
}

std::vector<std::size_t> epoch_order(std::size_t size, const DataLoaderOptions& options,
                                     std::uint64_t epoch) {
  std::vector<std::size_t> order(size);
  // seed + epoch wraps modulo 2^64, which still makes a valid seed.
  if (options.shuffle) {
    order = permutation(size, options.seed + epoch);
  } else {
    std::iota(order.begin(), order.end(), std::size_t{0});
  }
  if (options.world_size == 1) return order;
  // This rank's part of each global batch, in order (see Shards in loader.h).
  const std::size_t shards = options.world_size;
  const std::size_t batch = options.batch_size;
  const std::size_t full = size / (batch * shards);
  std::vector<std::size_t> shard;
  for (std::size_t k = 0; k < full; ++k) {
    const auto from =
        order.begin() + static_cast<std::ptrdiff_t>((k * shards + options.rank) * batch);
    shard.insert(shard.end(), from, from + static_cast<std::ptrdiff_t>(batch));
  }
  if (num_batches(size, options) == full) return shard;
  std::vector<std::size_t> tail(order.begin() + static_cast<std::ptrdiff_t>(full * batch * shards),
                                order.end());
  for (std::size_t i = 0; tail.size() < shards; ++i) tail.push_back(order[i % size]);
  const std::size_t begin = options.rank * tail.size() / shards;
  const std::size_t end = (options.rank + 1) * tail.size() / shards;
  shard.insert(shard.end(), tail.begin() + static_cast<std::ptrdiff_t>(begin),
               tail.begin() + static_cast<std::ptrdiff_t>(end));
  return shard;
}

Prefetcher::Prefetcher(std::size_t num_batches, std::size_t num_workers, std::size_t capacity,
                       std::function<void(std::size_t)> produce)
    : ready_(capacity, false),
      num_batches_(num_batches),
      capacity_(capacity),
      produce_(std::move(produce)) {
  workers_.reserve(num_workers);
  try {
    for (std::size_t i = 0; i < num_workers; ++i) workers_.emplace_back([this] { work(); });
  } catch (const std::system_error& e) {
    // The threads already started must not outlive this half-built object.
    stop_and_join();
    fail<InvalidArgument>("DataLoader", "could not start worker thread ", workers_.size() + 1,
                          " of ", num_workers, ": ", e.what());
  } catch (...) {
    stop_and_join();
    throw;
  }
}

Prefetcher::~Prefetcher() { stop_and_join(); }

void Prefetcher::stop_and_join() noexcept {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  space_cv_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
}

void Prefetcher::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    // Batch k reuses the slot of batch k - capacity, so k may only be claimed once the consumer
    // has released that one.
    space_cv_.wait(lock, [this] {
      return stop_ || next_claim_ >= num_batches_ || next_claim_ < consumed_ + capacity_;
    });
    if (stop_ || next_claim_ >= num_batches_) return;
    const std::size_t batch = next_claim_++;
    lock.unlock();
    produce_(batch);
    lock.lock();
    ready_[batch % capacity_] = true;
    ready_cv_.notify_all();
  }
}

void Prefetcher::wait_ready(std::size_t batch) {
  std::unique_lock lock(mutex_);
  if (batch != consumed_ || batch >= num_batches_) {
    fail<InvalidArgument>("DataLoader", "batch ", batch, " requested out of order (expected ",
                          consumed_, " of ", num_batches_, ")");
  }
  ready_cv_.wait(lock, [&] { return ready_[batch % capacity_]; });
}

void Prefetcher::release(std::size_t batch) {
  {
    std::lock_guard lock(mutex_);
    ready_[batch % capacity_] = false;
    consumed_ = batch + 1;
  }
  space_cv_.notify_all();
}

}  // namespace kiln::data::detail
