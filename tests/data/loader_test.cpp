// DataLoader: batching, per-epoch shuffling, worker prefetch (order, bounds, errors, shutdown)
// and the classification batcher.
#include <gtest/gtest.h>
#include <kiln/data/classification.h>
#include <kiln/data/loader.h>
#include <kiln/data/views.h>
#include <kiln/kiln.h>

#include <atomic>
#include <chrono>
#include <future>
#include <numeric>
#include <stdexcept>
#include <thread>

#include "support/devices.h"

namespace kiln::data {
namespace {

using namespace std::chrono_literals;
using Batch = std::vector<int>;

DatasetPtr<int> loader_numbers(int n) {
  std::vector<int> items(static_cast<std::size_t>(n));
  std::iota(items.begin(), items.end(), 0);
  return in_memory(std::move(items));
}

Batch identity(std::vector<int> items) { return items; }

std::vector<Batch> collect(const DataLoader<int, Batch>& loader, std::uint64_t epoch) {
  std::vector<Batch> out;
  for (Batch& b : loader.epoch(epoch)) out.push_back(std::move(b));
  return out;
}

// Runs fn on its own thread; false if it has not returned within the limit (a hang). The thread
// is then left behind: the test has failed either way.
template <class Fn>
bool finishes_within(std::chrono::seconds limit, Fn fn) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> f = done->get_future();
  std::thread([done, fn = std::move(fn)]() mutable {
    fn();
    done->set_value();
  }).detach();
  return f.wait_for(limit) == std::future_status::ready;
}

TEST(DataLoader, BatchesInOrderWithAPartialLastBatch) {
  DataLoader<int, Batch> loader(loader_numbers(10), identity, {.batch_size = 4});
  EXPECT_EQ(loader.num_batches(), 3u);
  EXPECT_EQ(collect(loader, 0), (std::vector<Batch>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  // Without shuffling every epoch is the same.
  EXPECT_EQ(collect(loader, 5), collect(loader, 0));

  DataLoader<int, Batch> dropping(loader_numbers(10), identity,
                                  {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(dropping.num_batches(), 2u);
  EXPECT_EQ(collect(dropping, 0), (std::vector<Batch>{{0, 1, 2, 3}, {4, 5, 6, 7}}));

  DataLoader<int, Batch> exact(loader_numbers(8), identity, {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(exact.num_batches(), 2u);
  DataLoader<int, Batch> big(loader_numbers(3), identity, {.batch_size = 5});
  EXPECT_EQ(collect(big, 0), (std::vector<Batch>{{0, 1, 2}}));
  DataLoader<int, Batch> none(loader_numbers(3), identity, {.batch_size = 5, .drop_last = true});
  EXPECT_EQ(none.num_batches(), 0u);
  EXPECT_TRUE(collect(none, 0).empty());
  DataLoader<int, Batch> empty(loader_numbers(0), identity, {.batch_size = 2, .num_workers = 2});
  EXPECT_TRUE(collect(empty, 0).empty());
}

// Shards: rank r's batch k is part r of global batch k (batch_size * world_size items); a last,
// smaller global batch is shared out evenly, padded from the start when it has fewer items than
// ranks; every rank gets the same number of batches.
std::vector<Batch> shard_batches(int items, std::size_t batch, std::size_t rank, std::size_t world,
                                 bool shuffle = false, bool drop_last = false) {
  DataLoader<int, Batch> loader(loader_numbers(items), identity,
                                {.batch_size = batch,
                                 .shuffle = shuffle,
                                 .seed = 4,
                                 .drop_last = drop_last,
                                 .rank = rank,
                                 .world_size = world});
  std::vector<Batch> batches = collect(loader, 1);
  EXPECT_EQ(batches.size(), loader.num_batches());
  return batches;
}

TEST(DataLoader, ShardsEachGlobalBatchAcrossTheRanks) {
  EXPECT_EQ(shard_batches(10, 2, 0, 2), (std::vector<Batch>{{0, 1}, {4, 5}, {8}}));
  EXPECT_EQ(shard_batches(10, 2, 1, 2), (std::vector<Batch>{{2, 3}, {6, 7}, {9}}));
  EXPECT_EQ(shard_batches(10, 2, 1, 2, false, true), (std::vector<Batch>{{2, 3}, {6, 7}}));
  // Five items over four ranks: the last rank takes the odd one.
  EXPECT_EQ(shard_batches(5, 4, 0, 4), (std::vector<Batch>{{0}}));
  EXPECT_EQ(shard_batches(5, 4, 3, 4), (std::vector<Batch>{{3, 4}}));
  // Two items over three ranks: the third gets the first item again.
  EXPECT_EQ(shard_batches(2, 1, 2, 3), (std::vector<Batch>{{0}}));
  // Shuffled, the ranks' batches joined in rank order are one process's batches of 2 * 3.
  DataLoader<int, Batch> whole(loader_numbers(23), identity,
                               {.batch_size = 6, .shuffle = true, .seed = 4});
  const std::vector<Batch> expected = collect(whole, 1);
  std::vector<std::vector<Batch>> ranks;
  for (std::size_t r = 0; r < 3; ++r) ranks.push_back(shard_batches(23, 2, r, 3, true));
  ASSERT_EQ(ranks[0].size(), expected.size());
  for (std::size_t k = 0; k < expected.size(); ++k) {
    Batch joined;
    for (const auto& rank : ranks) joined.insert(joined.end(), rank[k].begin(), rank[k].end());
    EXPECT_EQ(joined, expected[k]) << "global batch " << k;
  }
  EXPECT_THROW((DataLoader<int, Batch>(loader_numbers(4), identity,
                                       {.batch_size = 2, .rank = 2, .world_size = 2})),
               InvalidArgument);
  EXPECT_THROW(
      (DataLoader<int, Batch>(loader_numbers(4), identity, {.batch_size = 2, .world_size = 0})),
      InvalidArgument);
}

TEST(DataLoader, NextWalksTheSameBatches) {
  DataLoader<int, Batch> loader(loader_numbers(5), identity, {.batch_size = 2});
  auto epoch = loader.epoch(0);
  EXPECT_EQ(epoch.num_batches(), 3u);
  EXPECT_EQ(epoch.next(), (Batch{0, 1}));
  EXPECT_EQ(epoch.next(), (Batch{2, 3}));
  EXPECT_EQ(epoch.next(), (Batch{4}));
  EXPECT_EQ(epoch.next(), std::nullopt);
  EXPECT_EQ(epoch.next(), std::nullopt);
}

TEST(DataLoader, ShufflesEachEpochFromSeedPlusEpoch) {
  const DataLoaderOptions options{.batch_size = 7, .shuffle = true, .seed = 100};
  DataLoader<int, Batch> loader(loader_numbers(50), identity, options);
  for (std::uint64_t e : {0u, 1u, 2u}) {
    std::vector<int> seen;
    for (const Batch& b : collect(loader, e)) seen.insert(seen.end(), b.begin(), b.end());
    const auto order = permutation(50, 100 + e);
    ASSERT_EQ(seen.size(), 50u);
    for (std::size_t i = 0; i < 50; ++i) EXPECT_EQ(seen[i], static_cast<int>(order[i]));
    EXPECT_EQ(loader.epoch(e).order(), order);
  }
  EXPECT_NE(collect(loader, 0), collect(loader, 1));
  // Another loader with the same seed reproduces every epoch; seed 101's epoch 0 is epoch 1 here.
  DataLoader<int, Batch> twin(loader_numbers(50), identity, options);
  EXPECT_EQ(collect(twin, 2), collect(loader, 2));
  DataLoader<int, Batch> shifted(loader_numbers(50), identity,
                                 {.batch_size = 7, .shuffle = true, .seed = 101});
  EXPECT_EQ(collect(shifted, 0), collect(loader, 1));
  // drop_last drops the tail of the shuffled order, not of the dataset.
  DataLoader<int, Batch> dropping(
      loader_numbers(50), identity,
      {.batch_size = 7, .shuffle = true, .seed = 100, .drop_last = true});
  auto full = collect(loader, 3);
  full.pop_back();
  EXPECT_EQ(collect(dropping, 3), full);
}

// Batchers that take uneven, item-dependent time, so workers finish out of order.
Batch jittery(std::vector<int> items) {
  std::this_thread::sleep_for(std::chrono::microseconds(((items.front() * 7919) % 13) * 150));
  return items;
}

TEST(DataLoader, WorkersGiveTheSameBatchesInTheSameOrder) {
  const DataLoaderOptions base{.batch_size = 3, .shuffle = true, .seed = 9};
  DataLoader<int, Batch> serial(loader_numbers(100), jittery, base);
  const auto expected = collect(serial, 4);
  for (std::size_t workers : {1u, 2u, 3u, 8u}) {
    for (std::size_t prefetch : {0u, 1u, 5u}) {
      DataLoaderOptions options = base;
      options.num_workers = workers;
      options.prefetch = prefetch;
      DataLoader<int, Batch> parallel(loader_numbers(100), jittery, options);
      EXPECT_EQ(collect(parallel, 4), expected) << workers << " workers, prefetch " << prefetch;
    }
  }
}

TEST(DataLoader, WorkersPrefetchAheadButNoFurtherThanTheBound) {
  constexpr std::size_t kPrefetch = 3;
  auto started = std::make_shared<std::atomic<int>>(0);
  auto consumed = std::make_shared<std::atomic<int>>(0);
  auto furthest_ahead = std::make_shared<std::atomic<int>>(0);
  auto batcher = [=](std::vector<int> items) {
    ++*started;
    // Batch k (items k*2, k*2+1) may start once batch k - kPrefetch was handed over; the
    // consumer's count lags the loader's by at most one batch.
    const int k = items.front() / 2;
    int ahead = k - consumed->load();
    int prev = furthest_ahead->load();
    while (ahead > prev && !furthest_ahead->compare_exchange_weak(prev, ahead)) {
    }
    return items;
  };
  DataLoader<int, Batch> loader(loader_numbers(40), batcher,
                                {.batch_size = 2, .num_workers = 2, .prefetch = kPrefetch});
  auto epoch = loader.epoch(0);
  ASSERT_EQ(epoch.next(), (Batch{0, 1}));
  ++*consumed;
  // With batch 0 taken, batches 1..3 are built ahead, and no more.
  for (int i = 0; i < 500 && started->load() < 4; ++i) std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(started->load(), 4);
  int k = 1;
  while (auto b = epoch.next()) {
    EXPECT_EQ(b->front(), 2 * k++);
    ++*consumed;
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(k, 20);
  EXPECT_LE(furthest_ahead->load(), static_cast<int>(kPrefetch));
}

struct Boom : std::runtime_error {
  using std::runtime_error::runtime_error;
};

TEST(DataLoader, BatcherExceptionsReachTheConsumerAtTheirBatch) {
  auto failing = [](std::vector<int> items) {
    if (items.front() == 6) throw Boom("no batch 3");
    return items;
  };
  for (std::size_t workers : {0u, 1u, 3u}) {
    DataLoader<int, Batch> loader(loader_numbers(12), failing,
                                  {.batch_size = 2, .num_workers = workers});
    std::vector<Batch> before;
    try {
      for (Batch& b : loader.epoch(0)) before.push_back(b);
      FAIL() << "no exception with " << workers << " workers";
    } catch (const Boom& e) {
      EXPECT_STREQ(e.what(), "no batch 3");
    }
    EXPECT_EQ(before, (std::vector<Batch>{{0, 1}, {2, 3}, {4, 5}})) << workers << " workers";

    // The epoch goes on after the failed batch.
    auto epoch = loader.epoch(1);
    for (int k = 0; k < 3; ++k) EXPECT_TRUE(epoch.next().has_value());
    EXPECT_THROW(epoch.next(), Boom);
    EXPECT_EQ(epoch.next(), (Batch{8, 9}));
    EXPECT_EQ(epoch.next(), (Batch{10, 11}));
    EXPECT_EQ(epoch.next(), std::nullopt);
  }
}

// A dataset whose get() fails for one index, to check dataset errors travel like batcher ones.
class Gappy final : public Dataset<int> {
 public:
  std::size_t size() const override { return 10; }
  int get(std::size_t index) const override {
    if (index == 7) throw InvalidArgument("[Gappy] index 7 is missing");
    return static_cast<int>(index);
  }
};

TEST(DataLoader, DatasetExceptionsKeepTheirType) {
  DataLoader<int, Batch> loader(std::make_shared<Gappy>(), identity,
                                {.batch_size = 3, .num_workers = 2});
  auto epoch = loader.epoch(0);
  EXPECT_EQ(epoch.next(), (Batch{0, 1, 2}));
  EXPECT_EQ(epoch.next(), (Batch{3, 4, 5}));
  EXPECT_THROW(epoch.next(), InvalidArgument);
  EXPECT_EQ(epoch.next(), (Batch{9}));
}

TEST(DataLoader, DroppingAnEpochMidwayStopsItsWorkers) {
  auto built = std::make_shared<std::atomic<int>>(0);
  auto slow = [built](std::vector<int> items) {
    std::this_thread::sleep_for(5ms);
    ++*built;
    return items;
  };
  // Loader and epoch both destroyed after two of 100 batches: no hang, no crash, and the
  // workers stop (far fewer than 100 batches built).
  EXPECT_TRUE(finishes_within(20s, [slow] {
    auto loader = std::make_unique<DataLoader<int, Batch>>(
        loader_numbers(200), slow, DataLoaderOptions{.batch_size = 2, .num_workers = 4});
    auto epoch = std::make_unique<DataLoader<int, Batch>::Epoch>(loader->epoch(0));
    epoch->next();
    epoch->next();
    loader.reset();
    epoch.reset();
  }));
  EXPECT_LT(built->load(), 2 + 2 * 4 + 4 + 1);

  // Leaving a range-for early.
  EXPECT_TRUE(finishes_within(20s, [slow] {
    DataLoader<int, Batch> loader(loader_numbers(200), slow, {.batch_size = 2, .num_workers = 3});
    for (Batch& b : loader.epoch(0)) {
      if (b.front() >= 4) break;
    }
  }));

  // An epoch outlives its loader and still yields every batch.
  std::vector<Batch> seen;
  {
    std::optional<DataLoader<int, Batch>::Epoch> epoch;
    {
      DataLoader<int, Batch> loader(loader_numbers(9), identity,
                                    {.batch_size = 4, .num_workers = 2});
      epoch.emplace(loader.epoch(0));
    }
    for (Batch& b : *epoch) seen.push_back(b);
  }
  EXPECT_EQ(seen, (std::vector<Batch>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8}}));
}

TEST(DataLoader, RejectsBadArguments) {
  using Loader = DataLoader<int, Batch>;
  EXPECT_THROW((Loader(loader_numbers(3), identity, {.batch_size = 0})), InvalidArgument);
  EXPECT_THROW((Loader(nullptr, identity)), InvalidArgument);
  EXPECT_THROW((Loader(loader_numbers(3), Loader::Batcher{})), InvalidArgument);
  EXPECT_THROW((Loader(loader_numbers(3), identity, {.num_workers = 100000})), InvalidArgument);
}

TEST(DataLoader, MakeLoaderDeducesTheBatchType) {
  auto loader = make_loader(
      loader_numbers(6),
      [](const std::vector<int>& items) { return std::accumulate(items.begin(), items.end(), 0); },
      {.batch_size = 4});
  static_assert(std::is_same_v<decltype(loader), DataLoader<int, int>>);
  std::vector<int> sums;
  for (int s : loader.epoch(0)) sums.push_back(s);
  EXPECT_EQ(sums, (std::vector<int>{6, 9}));
}

using kiln::test::kCpu;

TEST(DataClassificationBatcher, StacksFeaturesAndLabels) {
  ClassificationBatcher batcher(kCpu);
  const ClassificationBatch b = batcher({{{1.f, 2.f, 3.f}, 4}, {{-1.f, 0.5f, 6.f}, 0}});
  EXPECT_EQ(b.features.shape(), (Shape{2, 3}));
  EXPECT_EQ(b.labels.shape(), (Shape{2}));
  EXPECT_EQ(b.features.dtype(), kCpu.settings().float_dtype);
  EXPECT_EQ(b.labels.dtype(), kCpu.settings().int_dtype);
  EXPECT_EQ(b.features.device(), kCpu);
  EXPECT_EQ(b.features.into_data().to_f64_vec(), (std::vector<double>{1, 2, 3, -1, 0.5, 6}));
  EXPECT_EQ(b.labels.into_data().to_f64_vec(), (std::vector<double>{4, 0}));

  EXPECT_THROW(batcher({}), InvalidArgument);
  EXPECT_THROW(batcher({{{1.f, 2.f}, 0}, {{1.f}, 1}}), ShapeMismatch);
}

TEST(DataClassificationBatcher, LoaderWithWorkersBuildsTheSameTensors) {
  std::vector<ClassificationItem> items;
  for (int i = 0; i < 37; ++i) {
    items.push_back({{static_cast<float>(i), static_cast<float>(i * i) / 10.f}, i % 5});
  }
  auto ds = in_memory(items);
  const DataLoaderOptions options{.batch_size = 8, .shuffle = true, .seed = 3};
  ClassificationLoader serial(ds, ClassificationBatcher(kCpu), options);
  DataLoaderOptions threaded = options;
  threaded.num_workers = 3;
  ClassificationLoader parallel(ds, ClassificationBatcher(kCpu), threaded);
  auto a = serial.epoch(2);
  auto b = parallel.epoch(2);
  const auto order = a.order();
  std::size_t row = 0;
  for (std::size_t k = 0; k < serial.num_batches(); ++k) {
    auto x = a.next();
    auto y = b.next();
    ASSERT_TRUE(x && y);
    const auto xf = x->features.into_data().to_f64_vec();
    const auto xl = x->labels.into_data().to_f64_vec();
    EXPECT_EQ(xf, y->features.into_data().to_f64_vec());
    EXPECT_EQ(xl, y->labels.into_data().to_f64_vec());
    for (std::size_t r = 0; r < xl.size(); ++r, ++row) {
      const ClassificationItem& want = items[order[row]];
      EXPECT_EQ(xf[2 * r], want.features[0]);
      EXPECT_EQ(xf[2 * r + 1], want.features[1]);
      EXPECT_EQ(xl[r], want.label);
    }
  }
  EXPECT_EQ(row, 37u);
  EXPECT_FALSE(a.next().has_value());
  EXPECT_FALSE(b.next().has_value());
}

}  // namespace
}  // namespace kiln::data
