// The checked size arithmetic (src/core/checked.h), the view-in-storage invariant
// (src/contract/strided.h) and the OutOfMemory scratch buffers (src/core/buffer.h), against
// 128-bit reference arithmetic written here.
#include "core/checked.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstdint>
#include <limits>
#include <random>

#include "contract/strided.h"
#include "core/buffer.h"
#include "support/error_message.h"

namespace kiln {
namespace {

using test::expect_error;
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();

bool fits(__int128 v) { return v >= kMin && v <= kMax; }

TEST(Checked, AddSubMulAgreeWith128BitArithmetic) {
  std::mt19937_64 random(13);
  const std::int64_t edges[] = {0,         1,          -1,        2,         kMax,
                                kMin,      kMax - 1,   kMin + 1,  1LL << 32, -(1LL << 32),
                                1LL << 62, 3037000499, 3037000500};
  auto draw = [&] {
    return random() % 2 ? edges[random() % std::size(edges)] : static_cast<std::int64_t>(random());
  };
  for (int i = 0; i < 20000; ++i) {
    const std::int64_t a = draw(), b = draw();
    const __int128 sum = __int128{a} + b, difference = __int128{a} - b, product = __int128{a} * b;
    if (fits(sum))
      EXPECT_EQ(checked::add(a, b, "t"), sum);
    else
      EXPECT_THROW((void)checked::add(a, b, "t"), InvalidArgument);
    if (fits(difference))
      EXPECT_EQ(checked::sub(a, b, "t"), difference);
    else
      EXPECT_THROW((void)checked::sub(a, b, "t"), InvalidArgument);
    if (fits(product))
      EXPECT_EQ(checked::mul(a, b, "t"), product);
    else
      EXPECT_THROW((void)checked::mul(a, b, "t"), InvalidArgument);
  }
  expect_error<InvalidArgument>([] { (void)checked::add(kMax, 1, "narrow", "start + length"); },
                                "narrow", {"start + length", "9223372036854775807 + 1"});
}

TEST(Checked, ElementCountsAndBytesStopAtTheLimits) {
  EXPECT_EQ(checked::num_elements(Shape{}, "t"), 1);
  EXPECT_EQ(checked::num_elements(Shape{3, 0, 5}, "t"), 0);
  EXPECT_EQ(checked::num_elements(Shape{1LL << 24, 1LL << 24}, "t"), 1LL << 48);
  EXPECT_THROW((void)checked::num_elements(Shape{(1LL << 24) + 1, 1LL << 24}, "t"),
               InvalidArgument);
  // A zero does not excuse the other dims, whose product would wrap in any later arithmetic.
  EXPECT_THROW((void)checked::num_elements(Shape{0, 1LL << 32, 1LL << 32}, "t"), InvalidArgument);
  expect_error<InvalidArgument>(
      [] {
        (void)checked::num_elements(Shape{2, -1}, "reshape");
      },
      "reshape", {"negative", "[2, -1]"});
  EXPECT_EQ(checked::dense_bytes(Shape{2, 3}, DType::F64, "t"), 48u);
  EXPECT_EQ(checked::dense_bytes(Shape{0, 1LL << 40}, DType::F64, "t"), 0u);
  expect_error<OutOfMemory>(
      [] { (void)checked::dense_bytes(Shape{1LL << 48}, DType::F64, "full"); }, "full",
      {"too large"});
  EXPECT_THROW((void)checked::dense_bytes(Shape{1LL << 62, 4}, DType::U8, "t"), OutOfMemory);
  EXPECT_EQ(checked::product(std::vector<std::int64_t>{4, 5, 0}, "t", "x"), 0);
}

TEST(Checked, ArangeLengthIsExactOverAllOfInt64) {
  auto reference = [](std::int64_t start, std::int64_t end, std::int64_t step) -> __int128 {
    __int128 count = 0;
    for (__int128 v = start; step > 0 ? v < end : v > end; v += step) ++count;
    return count;
  };
  const std::int64_t points[] = {kMin, kMin + 1, -(1LL << 62), -5,       -1,  0,
                                 1,    7,        1LL << 62,    kMax - 1, kMax};
  const std::int64_t steps[] = {kMin, -(1LL << 62), -3, -1, 1, 2, 1LL << 61, 1LL << 62, kMax};
  for (std::int64_t start : points) {
    for (std::int64_t end : points) {
      for (std::int64_t step : steps) {
        const __int128 span = __int128{end} - start;
        // The reference loop is only run where it is short.
        if (span / step > 64 || span / step < -64) continue;
        const __int128 count = reference(start, end, step);
        ASSERT_EQ(checked::arange_length(start, end, step, "t"), count)
            << start << " " << end << " " << step;
        for (std::int64_t i = 0; i < count; ++i) {
          EXPECT_EQ(checked::arange_value(start, step, i), __int128{start} + __int128{i} * step);
        }
      }
    }
  }
  EXPECT_THROW((void)checked::arange_length(0, 1, 0, "t"), InvalidArgument);
  EXPECT_THROW((void)checked::arange_length(kMin, kMax, 1, "t"), OutOfMemory);
}

TEST(Checked, ViewsMustLieInsideTheirStorage) {
  using strided::check_view_in_storage;
  // [2, 3] row-major in 6 elements: fine; shifted by one: reaches element 6.
  EXPECT_NO_THROW(check_view_in_storage(Shape{2, 3}, {3, 1}, 0, 6, "t"));
  EXPECT_THROW(check_view_in_storage(Shape{2, 3}, {3, 1}, 1, 6, "t"), InvalidArgument);
  // Flipped (negative strides) views reach down from their offset.
  EXPECT_NO_THROW(check_view_in_storage(Shape{2, 3}, {-3, -1}, 5, 6, "t"));
  EXPECT_THROW(check_view_in_storage(Shape{2, 3}, {-3, -1}, 4, 6, "t"), InvalidArgument);
  // Broadcast (stride 0) views of one element.
  EXPECT_NO_THROW(check_view_in_storage(Shape{1LL << 40, 7}, {0, 0}, 0, 1, "t"));
  // Empty views reach nothing, whatever their offset.
  EXPECT_NO_THROW(check_view_in_storage(Shape{0, 5}, {5, 1}, 1000, 1, "t"));
  // The review's narrow: offset 2^63 - 1 into 4 elements, and one that wraps negative.
  EXPECT_THROW(check_view_in_storage(Shape{1}, {1}, kMax, 4, "t"), InvalidArgument);
  EXPECT_THROW(check_view_in_storage(Shape{4}, {1}, -1, 4, "t"), InvalidArgument);
  // Reaches that overflow int64 are computed wide, not wrapped back inside.
  EXPECT_THROW(check_view_in_storage(Shape{3, 2}, {kMax, 1}, 0, 4, "t"), InvalidArgument);
  EXPECT_THROW(check_view_in_storage(Shape{-1}, {1}, 0, 4, "t"), InvalidArgument);
}

TEST(Checked, ScratchBuffersFailAsOutOfMemory) {
  EXPECT_THROW((void)detail::Buffer<double>(std::size_t{1} << 59), OutOfMemory);
  EXPECT_THROW((void)detail::Buffer<char>(std::size_t{1} << 62), OutOfMemory);
  EXPECT_THROW((void)detail::allocate_bytes(std::size_t{1} << 62), OutOfMemory);
  detail::Buffer<double> small(5, 2.5);
  EXPECT_EQ(small[4], 2.5);
  EXPECT_EQ(detail::allocate_bytes(3).size(), 3u);
}

}  // namespace
}  // namespace kiln
