// DataLoader: a dataset cut into batches, one epoch at a time, optionally shuffled and prepared
// ahead by worker threads.
//
//   auto [train, test] = data::random_split(data::load_digits(path), 0.8, 0);
//   data::ClassificationLoader loader(train, data::ClassificationBatcher(dev),
//                                     {.batch_size = 64, .shuffle = true, .seed = 1,
//                                      .num_workers = 2});
//   for (std::uint64_t e = 0; e < 10; ++e)
//     for (data::ClassificationBatch& batch : loader.epoch(e))
//       step(model, batch.features, batch.labels);
//
// Any batch type works: the batcher is a function from the items of one batch (in order) to a
// batch, e.g. `[](std::vector<Item> items) { return MyBatch{...}; }`; make_loader deduces the
// types from it.
//
// Order. Epoch e visits the items in data::permutation(size, seed + e) order when shuffle is
// set, else 0..size-1; batch k holds positions [k * batch_size, (k + 1) * batch_size) of that
// order, and the last batch is smaller unless drop_last drops it. The batches are the same, in
// the same order, whatever num_workers is: runs are reproducible from (seed, epoch).
//
// Shards. With world_size > 1 (data-parallel training, kiln/train/data_parallel.h), the epoch's
// order is cut into global batches of batch_size * world_size items, and this loader's batch k is
// part `rank` of global batch k: batch_size items, or an even share of a last, smaller global
// batch (padded from the start of the order when it has fewer items than ranks). Every rank gets
// the same number of batches, and together they visit each item once per epoch (padding aside).
//
// Workers. With num_workers > 0, that many threads build batches ahead of the consumer, at most
// `prefetch` of them ready or in the making at once. The dataset's get() and the batcher are
// then called from several threads at the same time. An exception thrown for batch k (by get()
// or the batcher) is rethrown to the consumer when it reaches batch k, after batches 0..k-1;
// iteration may go on after it, with batch k + 1. Dropping an epoch before its end (a `break`,
// an exception, destroying the loader) stops the workers: they finish the batch they are
// building, start no other, and are joined.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data {

struct DataLoaderOptions {
  std::size_t batch_size = 32;
  bool shuffle = false;  // a new order each epoch, from seed + epoch
  std::uint64_t seed = 0;
  bool drop_last = false;       // omit a last batch smaller than batch_size
  std::size_t num_workers = 0;  // threads building batches ahead; 0: built on the caller's thread
  std::size_t prefetch = 0;     // batches ready or being built ahead; 0: 2 * num_workers
  std::size_t rank = 0;         // this loader's shard of each global batch (see Shards)
  std::size_t world_size = 1;   // shards per global batch
};

namespace detail {

[[noreturn]] void fail_null_loader_argument(const char* what);
// InvalidArgument for batch_size 0, more than kMaxLoaderWorkers workers, or a rank outside
// [0, world_size).
void check_loader_options(const DataLoaderOptions& options);
inline constexpr std::size_t kMaxLoaderWorkers = 256;
std::size_t num_batches(std::size_t size, const DataLoaderOptions& options);
// The item order of one epoch (see the header comment).
std::vector<std::size_t> epoch_order(std::size_t size, const DataLoaderOptions& options,
                                     std::uint64_t epoch);

// The threads and bookkeeping behind a prefetching epoch, independent of the batch type.
// Workers claim batch numbers in increasing order, never more than `capacity` ahead of the
// consumer, and call produce(k), which stores batch k in slot k % capacity and must not throw.
// The consumer takes batches in order: wait_ready(k), read slot k % capacity, release(k).
class Prefetcher {
 public:
  Prefetcher(std::size_t num_batches, std::size_t num_workers, std::size_t capacity,
             std::function<void(std::size_t)> produce);
  ~Prefetcher();  // stops claiming, waits for the batches being built, joins
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  void wait_ready(std::size_t batch);
  void release(std::size_t batch);

 private:
  void work();
  void stop_and_join() noexcept;

  std::mutex mutex_;
  std::condition_variable ready_cv_;  // a slot was filled
  std::condition_variable space_cv_;  // a slot was freed, or stop
  std::vector<bool> ready_;           // by slot
  std::size_t num_batches_;
  std::size_t capacity_;
  std::size_t next_claim_ = 0;
  std::size_t consumed_ = 0;
  bool stop_ = false;
  std::function<void(std::size_t)> produce_;
  std::vector<std::thread> workers_;
};

}  // namespace detail

template <class Item, class Batch>
class DataLoader {
  struct Core {
    DatasetPtr<Item> dataset;
    std::function<Batch(std::vector<Item>)> batcher;
    DataLoaderOptions options;
    std::size_t num_batches;
  };
  class State;

 public:
  using item_type = Item;
  using batch_type = Batch;
  using Batcher = std::function<Batch(std::vector<Item>)>;
  class Epoch;

  // InvalidArgument for a null dataset, an empty batcher or bad options.
  DataLoader(DatasetPtr<Item> dataset, Batcher batcher, DataLoaderOptions options = {}) {
    if (!dataset) detail::fail_null_loader_argument("dataset");
    if (!batcher) detail::fail_null_loader_argument("batcher");
    detail::check_loader_options(options);
    const std::size_t batches = detail::num_batches(dataset->size(), options);
    core_ = std::make_shared<const Core>(
        Core{std::move(dataset), std::move(batcher), options, batches});
  }

  // Batches per epoch: ceil(size / batch_size), or floor with drop_last.
  std::size_t num_batches() const noexcept { return core_->num_batches; }
  const DataLoaderOptions& options() const noexcept { return core_->options; }
  const DatasetPtr<Item>& dataset() const noexcept { return core_->dataset; }

  // One pass over the data; its workers (if any) start now. The epoch shares the dataset and
  // batcher, so it may outlive the loader.
  Epoch epoch(std::uint64_t index) const { return Epoch(std::make_unique<State>(core_, index)); }

 private:
  std::shared_ptr<const Core> core_;
};

// A single pass: range-for over it, or call next() until it returns nullopt.
template <class Item, class Batch>
class DataLoader<Item, Batch>::Epoch {
 public:
  struct Sentinel {};
  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Batch& operator*() const { return *state_->current; }
    Batch* operator->() const { return &*state_->current; }
    Iterator& operator++() {
      state_->advance();
      return *this;
    }
    void operator++(int) { state_->advance(); }
    friend bool operator==(const Iterator& it, Sentinel) { return !it.state_->current; }

   private:
    friend class Epoch;
    explicit Iterator(State* state) : state_(state) {}
    State* state_;
  };

  // Fetches the first batch on its first call (rethrowing its exception, if any).
  Iterator begin() {
    if (!state_->started) {
      state_->started = true;
      state_->advance();
    }
    return Iterator(state_.get());
  }
  Sentinel end() const noexcept { return {}; }
  // The next batch, or nullopt after the last.
  std::optional<Batch> next() {
    state_->started = true;
    return state_->take_next();
  }
  std::size_t num_batches() const noexcept { return state_->core->num_batches; }
  std::uint64_t index() const noexcept { return state_->epoch; }
  // The item order of this epoch (dataset indices).
  const std::vector<std::size_t>& order() const noexcept { return state_->order; }

 private:
  friend class DataLoader;
  explicit Epoch(std::unique_ptr<State> state) : state_(std::move(state)) {}
  std::unique_ptr<State> state_;
};

template <class Item, class Batch>
class DataLoader<Item, Batch>::State {
 public:
  State(std::shared_ptr<const Core> core_in, std::uint64_t epoch_in)
      : core(std::move(core_in)),
        epoch(epoch_in),
        order(detail::epoch_order(core->dataset->size(), core->options, epoch_in)) {
    const DataLoaderOptions& options = core->options;
    if (options.num_workers == 0 || core->num_batches == 0) return;
    slots_.resize(options.prefetch != 0 ? options.prefetch : 2 * options.num_workers);
    prefetcher_.emplace(core->num_batches, options.num_workers, slots_.size(),
                        [this](std::size_t k) noexcept { produce(k); });
  }

  void advance() {
    current.reset();
    current = take_next();
  }

  std::optional<Batch> take_next() {
    if (next_ >= core->num_batches) return std::nullopt;
    // Counted first, so a batch that throws is reported once and the epoch can go on.
    const std::size_t k = next_++;
    if (!prefetcher_) return make_batch(k);
    prefetcher_->wait_ready(k);
    Result result = std::move(*slots_[k % slots_.size()]);
    slots_[k % slots_.size()].reset();
    prefetcher_->release(k);
    if (result.error) std::rethrow_exception(result.error);
    return std::move(result.batch);
  }

  std::shared_ptr<const Core> core;
  std::uint64_t epoch;
  std::vector<std::size_t> order;
  std::optional<Batch> current;
  bool started = false;

 private:
  struct Result {
    std::optional<Batch> batch;
    std::exception_ptr error;
  };

  Batch make_batch(std::size_t k) const {
    const std::size_t batch_size = core->options.batch_size;
    const std::size_t begin = k * batch_size;
    const std::size_t end = std::min(begin + batch_size, order.size());
    std::vector<Item> items;
    items.reserve(end - begin);
    for (std::size_t i = begin; i < end; ++i) items.push_back(core->dataset->get(order[i]));
    return core->batcher(std::move(items));
  }

  void produce(std::size_t k) noexcept {
    std::optional<Result>& slot = slots_[k % slots_.size()];
    try {
      slot.emplace(Result{make_batch(k), nullptr});
    } catch (...) {
      slot.emplace(Result{std::nullopt, std::current_exception()});
    }
  }

  std::size_t next_ = 0;
  std::vector<std::optional<Result>> slots_;
  // Last, so it is destroyed (its workers joined) before the slots and order they use.
  std::optional<detail::Prefetcher> prefetcher_;
};

// A loader whose item and batch types are deduced from the dataset and the batcher.
template <DatasetType D, class Fn>
requires std::is_invocable_v<Fn&, std::vector<item_of<D>>>
auto make_loader(std::shared_ptr<D> dataset, Fn batcher, DataLoaderOptions options = {}) {
  using Batch = std::decay_t<std::invoke_result_t<Fn&, std::vector<item_of<D>>>>;
  return DataLoader<item_of<D>, Batch>(std::move(dataset), std::move(batcher), options);
}

}  // namespace kiln::data
