// The host side of the selection topk, without a GPU: its plan, its validation, and its register
// lists (topk_lists.h, the text NVRTC compiles into the kernels): insert keeps a list's K best
// sorted, merge_best keeps the K best of two lists, for every list length the kernels compile
// (1 .. 32), narrow (<= 32-bit keys) and wide (64-bit keys) candidates, ties broken by the lower
// position, and none() after every real candidate. Checked against std::sort of the same
// candidates. backend_topk_test.cpp compares the kernels themselves with the CPU, on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/topk.h"
#include "backends/cuda/topk_lists.h"

using namespace kiln::cuda;
using namespace kiln::cuda::topk_lists;

namespace {

template <class U>
std::vector<Candidate<U>> random_candidates(std::mt19937_64& gen, std::size_t count,
                                            std::uint32_t first_position, bool ties) {
  std::vector<Candidate<U>> out;
  for (std::size_t i = 0; i < count; ++i) {
    const U key = ties ? static_cast<U>(gen() % 3) : static_cast<U>(gen());
    out.push_back(Candidate<U>::of(key, first_position + static_cast<std::uint32_t>(i)));
  }
  return out;
}

template <class U>
void sort_best_first(std::vector<Candidate<U>>& v) {
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.before(b); });
}

template <class U>
bool same(const Candidate<U>& a, const Candidate<U>& b) {
  return a.key() == b.key() && a.position() == b.position();
}

template <class U, int K>
void check_lists(std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  for (int trial = 0; trial < 50; ++trial) {
    const bool ties = trial % 2 == 1;
    // Fewer elements than K leave none() entries at the end.
    const std::size_t count = trial % 5 == 0 ? K / 2 : 3 * K + trial;
    auto all = random_candidates<U>(gen, count, 0, ties);
    Candidate<U> list[K];
    for (auto& c : list) c = Candidate<U>::none();
    for (const auto& c : all) {
      if (c.before(list[K - 1])) insert(list, c);
    }
    sort_best_first(all);
    for (int i = 0; i < K; ++i) {
      const std::string what = "K " + std::to_string(K) + " trial " + std::to_string(trial) +
                               " entry " + std::to_string(i);
      if (static_cast<std::size_t>(i) < all.size()) {
        EXPECT_TRUE(same(list[i], all[i])) << "insert: " << what;
      } else {
        EXPECT_TRUE(same(list[i], Candidate<U>::none())) << "insert: " << what;
      }
    }

    // Two sorted lists of K from disjoint positions: merge_best keeps the K best of both.
    auto left = random_candidates<U>(gen, K, 0, ties);
    auto right = random_candidates<U>(gen, K, 1000, ties);
    sort_best_first(left);
    sort_best_first(right);
    Candidate<U> a[K], b[K];
    std::copy(left.begin(), left.end(), a);
    std::copy(right.begin(), right.end(), b);
    merge_best(a, b);
    std::vector<Candidate<U>> both = left;
    both.insert(both.end(), right.begin(), right.end());
    sort_best_first(both);
    for (int i = 0; i < K; ++i) {
      EXPECT_TRUE(same(a[i], both[i]))
          << "merge_best: K " << K << " trial " << trial << " entry " << i;
    }
  }
}

template <class U>
void check_every_length(std::uint64_t seed) {
  check_lists<U, 1>(seed);
  check_lists<U, 2>(seed + 1);
  check_lists<U, 4>(seed + 2);
  check_lists<U, 8>(seed + 3);
  check_lists<U, 16>(seed + 4);
  check_lists<U, 32>(seed + 5);
}

}  // namespace

TEST(GpuTopkHost, InsertAndMergeKeepTheBestNarrowKeys) {
  check_every_length<std::uint8_t>(10);
  check_every_length<std::uint16_t>(20);
  check_every_length<std::uint32_t>(30);
}

TEST(GpuTopkHost, InsertAndMergeKeepTheBestWideKeys) { check_every_length<std::uint64_t>(40); }

TEST(GpuTopkHost, TiesByLowerPositionAndNoneLast) {
  // Equal keys: the lower position first. none() after everything real, even key 0 at the
  // largest position a row can have.
  using C = Candidate<std::uint32_t>;
  EXPECT_TRUE(C::of(5, 3).before(C::of(5, 4)));
  EXPECT_FALSE(C::of(5, 4).before(C::of(5, 3)));
  EXPECT_TRUE(C::of(6, 9).before(C::of(5, 0)));
  EXPECT_TRUE(C::of(0, 0x7ffffffe).before(C::none()));
  using W = Candidate<std::uint64_t>;
  EXPECT_TRUE(W::of(~0ull, 1).before(W::of(~0ull, 2)));
  EXPECT_TRUE(W::of(0, 0x7ffffffe).before(W::none()));
  EXPECT_EQ(W::of(123456789012345ull, 77).position(), 77u);
  EXPECT_EQ(W::of(123456789012345ull, 77).key(), 123456789012345ull);
}

// The plan: a warp per row when there are enough rows, long rows of few cut into aligned
// segments merged by a second kernel; the launches and the workspace that follow.
TEST(GpuTopkHost, PlansSplitLongRowsOfFewIntoSegments) {
  const TopkPlan many = plan_topk({.dtype = kiln::DType::F32, .rows = 4096, .n = 32768, .k = 8});
  EXPECT_EQ(many.list, 8);
  EXPECT_EQ(many.segments, 1);
  ASSERT_EQ(many.launches.size(), 1u);
  EXPECT_EQ(many.launches[0].kernel, TopkKernel::Select);
  EXPECT_EQ(many.launches[0].blocks, 4096u / 8);
  EXPECT_EQ(topk_workspace_bytes({.dtype = kiln::DType::F32, .rows = 4096, .n = 32768, .k = 8}),
            0u);

  const TopkDesc one{.dtype = kiln::DType::F64, .rows = 1, .n = 70000, .k = 9};
  const TopkPlan segmented = plan_topk(one);
  EXPECT_EQ(segmented.list, 16);
  EXPECT_EQ(segmented.segments, 18);  // of 3904: as many as kTopkMinSegment allows
  EXPECT_EQ(segmented.segment % 64, 0);
  EXPECT_GE(segmented.segments * segmented.segment, one.n);
  EXPECT_LT((segmented.segments - 1) * segmented.segment, one.n);
  ASSERT_EQ(segmented.launches.size(), 2u);
  EXPECT_EQ(segmented.launches[0].blocks, 3u);  // 18 warps
  EXPECT_EQ(segmented.launches[1].kernel, TopkKernel::Merge);
  EXPECT_EQ(segmented.launches[1].blocks, 1u);
  EXPECT_EQ(topk_workspace_bytes(one), 18u * 16 * 16);  // 16-byte entries, lists of 16

  // Empty results launch nothing.
  EXPECT_TRUE(plan_topk({.dtype = kiln::DType::I8, .rows = 0, .n = 5, .k = 2}).launches.empty());
  EXPECT_TRUE(plan_topk({.dtype = kiln::DType::I8, .rows = 3, .n = 5, .k = 0}).launches.empty());

  const TopkParams p = topk_params(one, segmented);
  EXPECT_EQ(p.segments, 18);
  EXPECT_EQ(p.largest, 1);
  EXPECT_EQ(p.wide_indices, 1);
  EXPECT_EQ(list_length(1), 1);
  EXPECT_EQ(list_length(3), 4);
  EXPECT_EQ(list_length(17), 32);
  EXPECT_EQ(list_length(32), 32);
  EXPECT_EQ(max_select_k(kiln::DType::I64), 16);
  EXPECT_EQ(max_select_k(kiln::DType::BF16), 32);
  EXPECT_EQ(max_select_k(kiln::DType::U8), 16);
  EXPECT_EQ(max_select_k(kiln::DType::I8), 16);
}

// Each field of a bad request named in the error.
TEST(GpuTopkHost, BadRequestsSayWhatIsWrong) {
  auto message_of = [](const TopkDesc& desc) -> std::string {
    try {
      validate(desc);
    } catch (const kiln::Error& e) {
      return e.what();
    }
    return "no error";
  };
  using kiln::DType;
  EXPECT_NE(message_of({.rows = -1, .n = 4, .k = 1}).find("must not be negative"),
            std::string::npos);
  EXPECT_NE(message_of({.rows = 1, .n = std::int64_t{1} << 31, .k = 1}).find("exceeds 2^31 - 1"),
            std::string::npos);
  EXPECT_NE(message_of({.rows = std::int64_t{1} << 40, .n = std::int64_t{1} << 30, .k = 1})
                .find("overflows"),
            std::string::npos);
  EXPECT_NE(message_of({.rows = 2, .n = 4, .k = 5}).find("k = 5 must be in [0, min(n = 4, 32)]"),
            std::string::npos);
  EXPECT_NE(message_of({.dtype = DType::U64, .rows = 2, .n = 40, .k = 17}).find("16)] for u64"),
            std::string::npos);
  EXPECT_NE(message_of({.rows = 2, .n = 4, .k = 1, .index_dtype = DType::I16})
                .find("index dtype must be i64 or i32, got i16"),
            std::string::npos);
  EXPECT_THROW(validate({.dtype = DType::Bool, .rows = 2, .n = 4, .k = 1}), kiln::UnsupportedDType);
  EXPECT_THROW(validate({.rows = 2, .n = 4, .k = -1}), kiln::InvalidArgument);
  EXPECT_EQ(message_of({.rows = 2, .n = 4, .k = 4}), "no error");
  EXPECT_EQ(message_of({.rows = 0, .n = 0, .k = 0}), "no error");
  // Every message names the op.
  EXPECT_EQ(message_of({.rows = 2, .n = 4, .k = 5}).rfind("[topk] ", 0), 0u);
}
