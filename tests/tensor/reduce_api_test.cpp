// The pinned public names of reductions, scans and sorting on Tensor<D, K>, on small values
// worked out by hand.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <vector>

using namespace kiln;

namespace {

Tensor<2> reduce_matrix() {
  // [[3, 1, 2],
  //  [-1, 5, 5]]
  return Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{3, 1, 2, -1, 5, 5}, {2, 3}),
                              Device::cpu());
}

template <class T, std::size_t D, class K>
std::vector<T> values(const Tensor<D, K>& t) {
  return t.into_data().template to_vec<T>();
}

}  // namespace

TEST(ReduceApi, SumAndMean) {
  const auto a = reduce_matrix();
  EXPECT_EQ(a.sum().shape(), (Shape{1}));
  EXPECT_EQ(values<float>(a.sum()), std::vector<float>{15});
  EXPECT_EQ(a.sum_dim(1).shape(), (Shape{2, 1}));
  EXPECT_EQ(values<float>(a.sum_dim(1)), (std::vector<float>{6, 9}));
  EXPECT_EQ(values<float>(a.sum_dim(-1)), (std::vector<float>{6, 9}));
  EXPECT_EQ(a.mean_dim(0).shape(), (Shape{1, 3}));
  EXPECT_EQ(values<float>(a.mean_dim(0)), (std::vector<float>{1, 3, 3.5}));
  EXPECT_EQ(values<float>(a.mean()), std::vector<float>{2.5});
  EXPECT_EQ(values<float>(a.prod()), std::vector<float>{-150});
  EXPECT_EQ(values<float>(a.prod_dim(0)), (std::vector<float>{-3, 5, 10}));
}

TEST(ReduceApi, MaxMinArg) {
  const auto a = reduce_matrix();
  EXPECT_EQ(a.max_dim(1).shape(), (Shape{2, 1}));
  EXPECT_EQ(values<float>(a.max_dim(1)), (std::vector<float>{3, 5}));
  EXPECT_EQ(values<float>(a.min_dim(0)), (std::vector<float>{-1, 1, 2}));
  EXPECT_EQ(values<float>(a.max()), std::vector<float>{5});
  EXPECT_EQ(values<float>(a.min()), std::vector<float>{-1});
  // The first of equal maxima wins.
  const Tensor<2, Int> arg = a.argmax(1);
  EXPECT_EQ(arg.shape(), (Shape{2, 1}));
  EXPECT_EQ(arg.dtype(), DType::I64);
  EXPECT_EQ(values<std::int64_t>(arg), (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(values<std::int64_t>(a.argmin(0)), (std::vector<std::int64_t>{1, 0, 0}));
  auto [v, i] = a.max_dim_with_indices(0);
  EXPECT_EQ(values<float>(v), (std::vector<float>{3, 5, 5}));
  EXPECT_EQ(values<std::int64_t>(i), (std::vector<std::int64_t>{0, 1, 1}));
}

TEST(ReduceApi, NaNPropagates) {
  const auto a = Tensor<1>::from_data(TensorData::from_vec(std::vector<float>{1, NAN, 7, NAN}, {4}),
                                      Device::cpu());
  EXPECT_TRUE(std::isnan(values<float>(a.max()).at(0)));
  EXPECT_TRUE(std::isnan(values<float>(a.min_dim(0)).at(0)));
  EXPECT_EQ(values<std::int64_t>(a.argmax(0)), std::vector<std::int64_t>{1});
  EXPECT_EQ(values<std::int64_t>(a.argmin(0)), std::vector<std::int64_t>{1});
  // NaN sorts last ascending, first descending.
  const auto s = values<float>(a.sort(0));
  EXPECT_EQ(s[0], 1);
  EXPECT_EQ(s[1], 7);
  EXPECT_TRUE(std::isnan(s[2]) && std::isnan(s[3]));
  EXPECT_EQ(values<std::int64_t>(a.argsort(0, true)), (std::vector<std::int64_t>{1, 3, 2, 0}));
}

TEST(ReduceApi, AnyAll) {
  const auto m = reduce_matrix().greater_elem(2.0);  // [[T, F, F], [F, T, T]]
  EXPECT_TRUE(values<bool>(m.any()).at(0));
  EXPECT_FALSE(values<bool>(m.all()).at(0));
  EXPECT_EQ(values<bool>(m.any_dim(0)), (std::vector<bool>{true, true, true}));
  EXPECT_EQ(values<bool>(m.all_dim(1)), (std::vector<bool>{false, false}));
  EXPECT_TRUE(values<bool>(reduce_matrix().all()).at(0));
}

TEST(ReduceApi, Sorting) {
  const auto a = reduce_matrix();
  EXPECT_EQ(values<float>(a.sort(1)), (std::vector<float>{1, 2, 3, -1, 5, 5}));
  EXPECT_EQ(values<float>(a.sort_descending(1)), (std::vector<float>{3, 2, 1, 5, 5, -1}));
  EXPECT_EQ(values<float>(a.sort(0)), (std::vector<float>{-1, 1, 2, 3, 5, 5}));
  // Stable: equal values keep their order, ascending and descending.
  EXPECT_EQ(values<std::int64_t>(a.argsort(1)), (std::vector<std::int64_t>{1, 2, 0, 0, 1, 2}));
  EXPECT_EQ(values<std::int64_t>(a.argsort(1, true)),
            (std::vector<std::int64_t>{0, 2, 1, 1, 2, 0}));
  auto [sv, si] = a.sort_with_indices(0, true);
  EXPECT_EQ(values<float>(sv), (std::vector<float>{3, 5, 5, -1, 1, 2}));
  EXPECT_EQ(values<std::int64_t>(si), (std::vector<std::int64_t>{0, 1, 1, 1, 0, 0}));
  const auto top = a.topk(2, 1);
  EXPECT_EQ(top.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(top), (std::vector<float>{3, 2, 5, 5}));
  auto [tv, ti] = a.topk_with_indices(1, 1, false);
  EXPECT_EQ(values<float>(tv), (std::vector<float>{1, -1}));
  EXPECT_EQ(values<std::int64_t>(ti), (std::vector<std::int64_t>{1, 0}));
}

TEST(ReduceApi, VarNormCumsum) {
  const auto a = reduce_matrix();
  // Row 0: mean 2, squares 1+1+0 = 2; row 1: mean 3, squares 16+4+4 = 24.
  const auto v = values<float>(a.var(1));
  ASSERT_EQ(v.size(), 2u);
  EXPECT_FLOAT_EQ(v[0], 1.0f);
  EXPECT_FLOAT_EQ(v[1], 12.0f);
  const auto vb = values<float>(a.var_bias(1));
  EXPECT_FLOAT_EQ(vb[0], 2.0f / 3.0f);
  EXPECT_FLOAT_EQ(vb[1], 8.0f);
  EXPECT_FLOAT_EQ(values<float>(a.norm()).at(0), std::sqrt(65.0f));
  EXPECT_FLOAT_EQ(values<float>(a.norm(1.0)).at(0), 17.0f);
  EXPECT_FLOAT_EQ(values<float>(a.norm(INFINITY)).at(0), 5.0f);
  const auto nd = values<float>(a.norm_dim(2.0, 0));
  EXPECT_FLOAT_EQ(nd[0], std::sqrt(10.0f));
  EXPECT_FLOAT_EQ(nd[1], std::sqrt(26.0f));
  EXPECT_FLOAT_EQ(nd[2], std::sqrt(29.0f));
  EXPECT_EQ(values<float>(a.cumsum(1)), (std::vector<float>{3, 4, 6, -1, 4, 9}));
  EXPECT_EQ(values<float>(a.cumsum(0)), (std::vector<float>{3, 1, 2, 2, 6, 7}));
  EXPECT_EQ(values<float>(a.cumprod(1)), (std::vector<float>{3, 3, 6, -1, -5, -25}));
  EXPECT_EQ(values<float>(a.cummax(1)), (std::vector<float>{3, 3, 3, -1, 5, 5}));
  EXPECT_EQ(values<float>(a.cummin(0)), (std::vector<float>{3, 1, 2, -1, 1, 2}));
}

TEST(ReduceApi, IntTensors) {
  const auto i = Tensor<1, Int>::arange(1, 6, Device::cpu());  // 1..5
  EXPECT_EQ(values<std::int64_t>(i.sum()), std::vector<std::int64_t>{15});
  EXPECT_EQ(values<std::int64_t>(i.prod()), std::vector<std::int64_t>{120});
  EXPECT_EQ(values<std::int64_t>(i.cumsum(0)), (std::vector<std::int64_t>{1, 3, 6, 10, 15}));
  EXPECT_EQ(values<std::int64_t>(i.sort_descending(0)), (std::vector<std::int64_t>{5, 4, 3, 2, 1}));
  EXPECT_EQ(values<std::int64_t>(i.topk(2, 0)), (std::vector<std::int64_t>{5, 4}));
}
