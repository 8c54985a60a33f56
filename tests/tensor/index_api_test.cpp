// The public indexing and joining API on small hand-checked examples.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <vector>

#include "support/devices.h"

using namespace kiln;

namespace {

using kiln::test::kCpu;

// [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
Tensor<2> grid() {
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(i);
  return Tensor<2>::from_data(TensorData::from_vec(v, {3, 4}), kCpu);
}

template <std::size_t D, class K>
std::vector<double> values(const Tensor<D, K>& t) {
  return t.into_data().to_f64_vec();
}

Tensor<1, Int> ints(std::vector<std::int64_t> v) {
  return Tensor<1, Int>::from_data(TensorData::from_vec(v), kCpu);
}

}  // namespace

TEST(IndexApi, SliceWithStepsAndNegativeBounds) {
  auto x = grid();
  auto a = x.slice({Slice(1, 3), Slice(0, std::nullopt, 2)});
  EXPECT_EQ(a.shape(), (Shape{2, 2}));
  EXPECT_EQ(values(a), (std::vector<double>{4, 6, 8, 10}));
  // Negative start counts from the end; a negative step walks the range backwards.
  auto b = x.slice({Slice(-1, std::nullopt), Slice(0, std::nullopt, -1)});
  EXPECT_EQ(values(b), (std::vector<double>{11, 10, 9, 8}));
  auto c = x.slice({Slice(0, std::nullopt, -2), Slice(1, -1)});
  EXPECT_EQ(values(c), (std::vector<double>{9, 10, 1, 2}));
  // Out-of-range bounds clamp; an empty range gives an empty tensor.
  EXPECT_EQ(x.slice({Slice(2, 100)}).shape(), (Shape{1, 4}));
  EXPECT_EQ(x.slice({Slice(3, 1)}).shape(), (Shape{0, 4}));
  EXPECT_EQ(values(x.slice({Slice::index(1), Slice::index(-1)})), (std::vector<double>{7}));
}

TEST(IndexApi, SliceAssignAndFill) {
  auto x = grid();
  auto patch = Tensor<2>::full({2, 2}, -1.0, kCpu);
  auto y = x.slice_assign({Slice(0, 2), Slice(2, 4)}, patch);
  EXPECT_EQ(values(y), (std::vector<double>{0, 1, -1, -1, 4, 5, -1, -1, 8, 9, 10, 11}));
  EXPECT_EQ(values(x)[2], 2.0);  // x is unchanged
  auto z = x.slice_fill({Slice::all(), Slice(0, std::nullopt, -3)}, 7.0);
  // Columns 3 and 0: the backward walk starts at the range's last element.
  EXPECT_EQ(values(z), (std::vector<double>{7, 1, 2, 7, 7, 5, 6, 7, 7, 9, 10, 7}));
}

TEST(IndexApi, CatStackChunkSplitNarrow) {
  auto x = grid();
  auto c0 = Tensor<2>::cat({x, x.slice({Slice(0, 1)})}, 0);
  EXPECT_EQ(c0.shape(), (Shape{4, 4}));
  EXPECT_EQ(values(c0.slice({Slice(3, 4)})), (std::vector<double>{0, 1, 2, 3}));
  auto c1 = Tensor<2>::cat({x.slice({Slice::all(), Slice(3, 4)}), x}, -1);
  EXPECT_EQ(values(c1.slice({Slice(0, 1)})), (std::vector<double>{3, 0, 1, 2, 3}));

  auto s = Tensor<2>::stack({x, x * 2.0}, 1);
  EXPECT_EQ(s.shape(), (Shape{3, 2, 4}));
  EXPECT_EQ(values(s.slice({Slice(1, 2), Slice(1, 2)})), (std::vector<double>{8, 10, 12, 14}));

  auto chunks = x.chunk(3, 1);  // ceil(4 / 3) = 2 columns each: two chunks
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(values(chunks[1]), (std::vector<double>{2, 3, 6, 7, 10, 11}));
  auto parts = x.split(2, 0);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].shape(), (Shape{2, 4}));
  EXPECT_EQ(parts[1].shape(), (Shape{1, 4}));
  auto sized = x.split_with_sizes({1, 0, 3}, 1);
  ASSERT_EQ(sized.size(), 3u);
  EXPECT_EQ(sized[1].shape(), (Shape{3, 0}));
  EXPECT_EQ(values(sized[2].slice({Slice(0, 1)})), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(values(x.narrow(1, -2, 2).slice({Slice(2, 3)})), (std::vector<double>{10, 11}));

  auto r = x.slice({Slice(0, 1), Slice(0, 2)}).repeat({2, 3});
  EXPECT_EQ(r.shape(), (Shape{2, 6}));
  EXPECT_EQ(values(r), (std::vector<double>{0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1}));
}

TEST(IndexApi, MaskFillAndWhere) {
  auto x = grid();
  auto mask = x.greater_elem(8.5);
  EXPECT_EQ(values(x.mask_fill(mask, -1.0)),
            (std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7, 8, -1, -1, -1}));
  auto other = Tensor<2>::full({3, 4}, 100.0, kCpu);
  EXPECT_EQ(values(x.mask_where(mask, other)),
            (std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7, 8, 100, 100, 100}));
  // The mask broadcasts: a [1, 4] mask applies to every row.
  auto column_mask = Tensor<2, Bool>::from_data(
      TensorData::from_vec(std::vector<bool>{true, false, false, true}, {1, 4}), kCpu);
  EXPECT_EQ(values(x.mask_fill(column_mask, 0.0)),
            (std::vector<double>{0, 1, 2, 0, 0, 5, 6, 0, 0, 9, 10, 0}));
  EXPECT_EQ(values(x.mask_select(mask)), (std::vector<double>{9, 10, 11}));
  auto where = mask.argwhere();
  EXPECT_EQ(where.shape(), (Shape{3, 2}));
  EXPECT_EQ(values(where), (std::vector<double>{2, 1, 2, 2, 2, 3}));
}

TEST(IndexApi, GatherScatterSelect) {
  auto x = grid();
  auto idx = Tensor<2, Int>::from_data(
      TensorData::from_vec(std::vector<std::int64_t>{3, 0, 1, 1}, {2, 2}), kCpu);
  // out[i][j] = x[i][idx[i][j]]
  EXPECT_EQ(values(x.gather(1, idx)), (std::vector<double>{3, 0, 5, 5}));

  auto zeros = Tensor<2>::zeros({2, 4}, kCpu);
  auto ones = Tensor<2>::ones({2, 2}, kCpu);
  // Duplicates: Assign keeps one write, Add sums them.
  EXPECT_EQ(values(zeros.scatter(1, idx, ones * 5.0)),
            (std::vector<double>{5, 0, 0, 5, 0, 5, 0, 0}));
  EXPECT_EQ(values(zeros.scatter_add(1, idx, ones)), (std::vector<double>{1, 0, 0, 1, 0, 2, 0, 0}));
  auto ordered =
      Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{1, 2, 3, 4}, {2, 2}), kCpu);
  // The last duplicate in index order wins.
  EXPECT_EQ(values(zeros.scatter(1, idx, ordered)), (std::vector<double>{2, 0, 0, 1, 0, 4, 0, 0}));
  EXPECT_EQ(values(zeros.scatter(1, idx, ordered, IndexingUpdate::Max)),
            (std::vector<double>{2, 0, 0, 1, 0, 4, 0, 0}));

  EXPECT_EQ(values(x.select(0, ints({2, 0, 2}))),
            (std::vector<double>{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11}));
  EXPECT_EQ(values(x.index_select(1, ints({1}))), (std::vector<double>{1, 5, 9}));
  auto added = x.select_assign(0, ints({1, 1}), Tensor<2>::ones({2, 4}, kCpu));
  EXPECT_EQ(values(added.slice({Slice(1, 2)})), (std::vector<double>{6, 7, 8, 9}));

  auto rows = Tensor<2, Int>::from_data(
      TensorData::from_vec(std::vector<std::int64_t>{2, 1, 0, 3}, {2, 2}), kCpu);
  EXPECT_EQ(values(x.gather_nd<1>(rows)), (std::vector<double>{9, 3}));
  auto written = x.scatter_nd(
      rows, Tensor<1>::from_data(TensorData::from_vec(std::vector<float>{-1, -2}), kCpu));
  EXPECT_EQ(values(written.slice({Slice(2, 3), Slice(1, 2)})), (std::vector<double>{-1}));
  EXPECT_EQ(values(written.slice({Slice(0, 1), Slice(3, 4)})), (std::vector<double>{-2}));
}

TEST(IndexApi, IntAndBoolKinds) {
  auto i = Tensor<1, Int>::arange(0, 6, kCpu);
  EXPECT_EQ(values(Tensor<1, Int>::cat({i, i.slice({Slice(4, 6)})}, 0)),
            (std::vector<double>{0, 1, 2, 3, 4, 5, 4, 5}));
  auto b = i.greater_elem(2);
  EXPECT_EQ(values(b.select(0, ints({5, 0}))), (std::vector<double>{1, 0}));
  EXPECT_EQ(values(b.repeat_dim(0, 2).argwhere()), (std::vector<double>{3, 4, 5, 9, 10, 11}));
}
