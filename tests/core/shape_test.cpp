// Shape and its DimVector (inline storage up to kInline dims, heap beyond).
#include <gtest/gtest.h>
#include <kiln/shape.h>

#include <numeric>
#include <sstream>
#include <vector>

namespace kiln {
namespace {

using detail::DimVector;
constexpr std::size_t kInline = DimVector::kInline;

std::vector<std::int64_t> values_of(const DimVector& v) { return {v.begin(), v.end()}; }

std::vector<std::int64_t> iota(std::size_t n, std::int64_t first = 1) {
  std::vector<std::int64_t> out(n);
  std::iota(out.begin(), out.end(), first);
  return out;
}

TEST(DimVector, PushBackAcrossTheInlineLimitKeepsValues) {
  DimVector v;
  EXPECT_TRUE(v.empty());
  for (std::size_t i = 0; i < kInline + 3; ++i) {
    v.push_back(static_cast<std::int64_t>(i + 1));
    ASSERT_EQ(values_of(v), iota(i + 1)) << "after " << i + 1 << " pushes";
  }
  EXPECT_EQ(v.back(), static_cast<std::int64_t>(kInline + 3));
}

TEST(DimVector, ResizeBetweenHeapAndInline) {
  DimVector v{std::span<const std::int64_t>(iota(kInline + 2))};
  ASSERT_EQ(v.size(), kInline + 2);
  v.resize(3);  // heap -> inline keeps the prefix
  EXPECT_EQ(values_of(v), iota(3));
  v.resize(kInline + 1, 9);  // inline -> heap fills the new tail
  std::vector<std::int64_t> want = iota(3);
  want.resize(kInline + 1, 9);
  EXPECT_EQ(values_of(v), want);
  v.resize(kInline);  // exactly at the limit: inline again
  want.resize(kInline);
  EXPECT_EQ(values_of(v), want);
  v.resize(0);
  EXPECT_TRUE(v.empty());
}

TEST(DimVector, InsertAndEraseAcrossTheLimit) {
  DimVector v{std::span<const std::int64_t>(iota(kInline))};
  v.insert(0, 100);  // inline -> heap
  std::vector<std::int64_t> want = iota(kInline);
  want.insert(want.begin(), 100);
  EXPECT_EQ(values_of(v), want);
  v.insert(3, 200);
  want.insert(want.begin() + 3, 200);
  EXPECT_EQ(values_of(v), want);
  v.erase(0);
  want.erase(want.begin());
  EXPECT_EQ(values_of(v), want);
  v.erase(2);  // heap -> inline
  want.erase(want.begin() + 2);
  EXPECT_EQ(values_of(v), want);
  EXPECT_EQ(v.size(), kInline);
}

TEST(DimVector, CopyAndMoveInBothModes) {
  for (std::size_t n : {std::size_t{2}, kInline + 4}) {
    const DimVector original{std::span<const std::int64_t>(iota(n, 10))};
    DimVector copy = original;
    EXPECT_EQ(copy, original);
    copy[0] = -1;
    EXPECT_EQ(original[0], 10) << "a copy does not share storage";
    DimVector moved = std::move(copy);
    EXPECT_EQ(moved[0], -1);
    EXPECT_EQ(moved.size(), n);
    DimVector assigned;
    assigned = original;
    EXPECT_EQ(assigned, original);
    DimVector small{1, 2};
    small = std::move(assigned);
    EXPECT_EQ(small, original);
  }
}

TEST(DimVector, EqualityComparesSizeAndValues) {
  EXPECT_EQ((DimVector{1, 2, 3}), (DimVector{1, 2, 3}));
  EXPECT_FALSE((DimVector{1, 2, 3}) == (DimVector{1, 2}));
  EXPECT_FALSE((DimVector{1, 2, 3}) == (DimVector{1, 2, 4}));
  const DimVector big{std::span<const std::int64_t>(iota(kInline + 1))};
  EXPECT_EQ(big, DimVector(std::span<const std::int64_t>(iota(kInline + 1))));
}

TEST(Shape, Basics) {
  const Shape s{2, 3, 4};
  EXPECT_EQ(s.rank(), 3u);
  EXPECT_EQ(s[0], 2);
  EXPECT_EQ(s[2], 4);
  EXPECT_EQ(s.num_elements(), 24);
  EXPECT_EQ(std::vector<std::int64_t>(s.dims().begin(), s.dims().end()),
            (std::vector<std::int64_t>{2, 3, 4}));
  EXPECT_EQ(s.to_vector(), (std::vector<std::int64_t>{2, 3, 4}));
  EXPECT_EQ(s, Shape(std::vector<std::int64_t>{2, 3, 4}));
  EXPECT_FALSE(s == (Shape{2, 3}));
  EXPECT_FALSE(s == (Shape{2, 3, 5}));
}

TEST(Shape, EmptyAndZeroSized) {
  EXPECT_EQ(Shape{}.rank(), 0u);
  EXPECT_EQ(Shape{}.num_elements(), 1);  // the empty product
  EXPECT_EQ((Shape{3, 0, 2}).num_elements(), 0);
}

TEST(Shape, HighRankGoesToTheHeap) {
  std::vector<std::int64_t> dims(kInline + 2, 2);
  Shape s(dims);
  EXPECT_EQ(s.rank(), kInline + 2);
  EXPECT_EQ(s.num_elements(), std::int64_t{1} << (kInline + 2));
  s[kInline + 1] = 5;
  EXPECT_EQ(s[kInline + 1], 5);
}

TEST(Shape, Printing) {
  EXPECT_EQ((Shape{2, 3}).to_string(), "[2, 3]");
  EXPECT_EQ(Shape{}.to_string(), "[]");
  std::ostringstream out;
  out << Shape{7};
  EXPECT_EQ(out.str(), "[7]");
}

}  // namespace
}  // namespace kiln
