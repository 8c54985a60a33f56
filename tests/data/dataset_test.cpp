// Datasets and their views: in-memory data, permutations, subsets, shuffles, splits, maps.
#include <gtest/gtest.h>
#include <kiln/data/dataset.h>
#include <kiln/data/views.h>
#include <kiln/error.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>

namespace kiln::data {
namespace {

std::shared_ptr<const InMemoryDataset<int>> numbers(int n, int offset = 0) {
  std::vector<int> items(static_cast<std::size_t>(n));
  std::iota(items.begin(), items.end(), offset);
  return std::make_shared<const InMemoryDataset<int>>(std::move(items));
}

template <class Item>
std::vector<Item> all_items(const Dataset<Item>& dataset) {
  std::vector<Item> out;
  for (std::size_t i = 0; i < dataset.size(); ++i) out.push_back(dataset.get(i));
  return out;
}

bool is_permutation_of_range(const std::vector<std::size_t>& order) {
  std::vector<std::size_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] != i) return false;
  }
  return true;
}

TEST(DataDataset, InMemoryHoldsItemsAndRejectsBadIndices) {
  auto ds = in_memory(std::vector<std::string>{"a", "b", "c"});
  EXPECT_EQ(ds->size(), 3u);
  EXPECT_EQ(ds->get(0), "a");
  EXPECT_EQ(ds->get(2), "c");
  try {
    ds->get(3);
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("index 3"), std::string::npos) << message;
    EXPECT_NE(message.find("3 items"), std::string::npos) << message;
  }
  EXPECT_THROW(in_memory(std::vector<int>{})->get(0), Error);
}

TEST(DataPermutation, IsAPermutationAndReproducible) {
  for (std::size_t n : {0u, 1u, 2u, 7u, 1000u}) {
    for (std::uint64_t seed : {0ull, 1ull, 42ull, ~0ull}) {
      const auto order = permutation(n, seed);
      ASSERT_EQ(order.size(), n);
      EXPECT_TRUE(is_permutation_of_range(order)) << "n=" << n << " seed=" << seed;
      EXPECT_EQ(order, permutation(n, seed));
    }
  }
  // Distinct seeds give distinct orders (1000! orders: a collision means a broken seed path).
  std::set<std::vector<std::size_t>> seen;
  for (std::uint64_t seed = 0; seed < 50; ++seed) seen.insert(permutation(1000, seed));
  EXPECT_EQ(seen.size(), 50u);
}

// Every one of the 24 orders of 4 items should be equally likely: a chi-square test over many
// seeds (23 degrees of freedom; 60 is exceeded with probability about 3e-5 by a fair shuffle).
TEST(DataPermutation, OrdersAreUniform) {
  constexpr int kSeeds = 48000;
  std::map<std::vector<std::size_t>, int> counts;
  for (int seed = 0; seed < kSeeds; ++seed)
    ++counts[permutation(4, static_cast<std::uint64_t>(seed))];
  ASSERT_EQ(counts.size(), 24u);
  const double expected = kSeeds / 24.0;
  double chi2 = 0;
  for (const auto& [order, count] : counts)
    chi2 += (count - expected) * (count - expected) / expected;
  EXPECT_LT(chi2, 60.0);

  // And each item lands in each of 10 positions equally often (binomial, 6 sd slack).
  constexpr int kRuns = 20000;
  std::vector<std::vector<int>> at(10, std::vector<int>(10, 0));
  for (int seed = 0; seed < kRuns; ++seed) {
    const auto order = permutation(10, static_cast<std::uint64_t>(seed) * 7919 + 3);
    for (std::size_t pos = 0; pos < 10; ++pos) ++at[pos][order[pos]];
  }
  const double mean = kRuns / 10.0;
  const double sd = std::sqrt(kRuns * 0.1 * 0.9);
  for (const auto& row : at) {
    for (int count : row) EXPECT_NEAR(count, mean, 6 * sd);
  }
}

TEST(DataViews, SubsetAndSlice) {
  auto base = numbers(10, 100);
  auto sub = subset(base, {9, 0, 0, 4});
  EXPECT_EQ(all_items(*sub), (std::vector<int>{109, 100, 100, 104}));
  EXPECT_THROW(subset(base, {1, 10}), InvalidArgument);
  EXPECT_THROW(sub->get(4), InvalidArgument);

  EXPECT_EQ(all_items(*slice(base, 3, 6)), (std::vector<int>{103, 104, 105}));
  EXPECT_EQ(slice(base, 10, 10)->size(), 0u);
  EXPECT_THROW(slice(base, 4, 3), InvalidArgument);
  EXPECT_THROW(slice(base, 0, 11), InvalidArgument);
  // Views of views.
  EXPECT_EQ(all_items(*slice(sub, 1, 3)), (std::vector<int>{100, 100}));
}

TEST(DataViews, ShuffledFollowsThePermutationOfItsSeed) {
  auto base = numbers(50, 1000);
  auto a = shuffled(base, 5);
  const auto order = permutation(50, 5);
  ASSERT_EQ(a->size(), 50u);
  for (std::size_t i = 0; i < 50; ++i) EXPECT_EQ(a->get(i), 1000 + static_cast<int>(order[i]));
  EXPECT_EQ(all_items(*a), all_items(*shuffled(base, 5)));
  EXPECT_NE(all_items(*a), all_items(*shuffled(base, 6)));
  auto sorted = all_items(*a);
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, all_items(*base));
}

TEST(DataViews, RandomSplitPartitionsReproducibly) {
  auto base = numbers(10);
  const auto split = random_split(base, 0.8, 11);
  ASSERT_EQ(split.train->size(), 8u);
  ASSERT_EQ(split.test->size(), 2u);
  std::vector<int> both = all_items(*split.train);
  for (int v : all_items(*split.test)) both.push_back(v);
  // Train then test is exactly the seed's permutation: disjoint and complete.
  const auto order = permutation(10, 11);
  for (std::size_t i = 0; i < 10; ++i) EXPECT_EQ(both[i], static_cast<int>(order[i]));

  const auto again = random_split(base, 0.8, 11);
  EXPECT_EQ(all_items(*again.train), all_items(*split.train));
  EXPECT_EQ(all_items(*again.test), all_items(*split.test));
  EXPECT_NE(all_items(*random_split(base, 0.8, 12).train), all_items(*split.train));

  // round(fraction * size): 0.25 * 10 = 2.5 -> 3; 1797 * 0.8 = 1437.6 -> 1438.
  EXPECT_EQ(random_split(base, 0.25, 0).train->size(), 3u);
  EXPECT_EQ(random_split(numbers(1797), 0.8, 0).train->size(), 1438u);
  EXPECT_EQ(random_split(base, 0.0, 0).train->size(), 0u);
  EXPECT_EQ(random_split(base, 1.0, 0).test->size(), 0u);
  EXPECT_THROW(random_split(base, 1.5, 0), InvalidArgument);
  EXPECT_THROW(random_split(base, -0.1, 0), InvalidArgument);
  EXPECT_THROW(random_split(base, std::numeric_limits<double>::quiet_NaN(), 0), InvalidArgument);
}

TEST(DataViews, ConcatSkipsEmptyParts) {
  auto c = concat<int>({numbers(2, 0), numbers(0), numbers(3, 10), numbers(0)});
  EXPECT_EQ(all_items(*c), (std::vector<int>{0, 1, 10, 11, 12}));
  EXPECT_THROW(c->get(5), InvalidArgument);
  EXPECT_EQ(concat<int>({})->size(), 0u);
}

TEST(DataViews, MapIsLazyAndMaterializeAppliesOnce) {
  auto base = numbers(4, 1);
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto squares = map(base, [calls](const int& v) {
    ++*calls;
    return std::to_string(v * v);
  });
  static_assert(std::is_same_v<decltype(squares), DatasetPtr<std::string>>);
  EXPECT_EQ(*calls, 0);
  EXPECT_EQ(squares->get(2), "9");
  EXPECT_EQ(squares->get(2), "9");
  EXPECT_EQ(*calls, 2);
  auto fixed = materialize(squares);
  EXPECT_EQ(*calls, 6);
  EXPECT_EQ(all_items(*fixed), (std::vector<std::string>{"1", "4", "9", "16"}));
  EXPECT_EQ(*calls, 6);
  EXPECT_THROW(squares->get(4), InvalidArgument);
}

}  // namespace
}  // namespace kiln::data
