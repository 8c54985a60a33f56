// Error paths of reductions, scans and sorts: bad dims, wrong kinds, k out of range, reducing
// nothing where the result is undefined. Each error is typed and its message names the op.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <functional>
#include <string>

#include "support/error_message.h"
#include "tensor/common.h"

using namespace kiln;

namespace kiln::reduce_errors_test {
namespace {

using kiln::test::expect_error;

Tensor<2> floats() { return Tensor<2>::ones({2, 3}, Device::cpu()); }

TEST(ReduceErrors, DimOutOfRange) {
  const auto a = floats();
  expect_error<InvalidArgument>([&] { (void)a.sum_dim(2); }, "sum_dim");
  expect_error<InvalidArgument>([&] { (void)a.sum_dim(-3); }, "sum_dim");
  expect_error<InvalidArgument>([&] { (void)a.prod_dim(5); }, "prod_dim");
  expect_error<InvalidArgument>([&] { (void)a.mean_dim(2); }, "mean_dim");
  expect_error<InvalidArgument>([&] { (void)a.max_dim(2); }, "max_dim");
  expect_error<InvalidArgument>([&] { (void)a.min_dim(-3); }, "min_dim");
  expect_error<InvalidArgument>([&] { (void)a.argmax(2); }, "argmax");
  expect_error<InvalidArgument>([&] { (void)a.argmin(2); }, "argmin");
  expect_error<InvalidArgument>([&] { (void)a.max_dim_with_indices(7); }, "max_dim_with_indices");
  expect_error<InvalidArgument>([&] { (void)a.min_dim_with_indices(7); }, "min_dim_with_indices");
  expect_error<InvalidArgument>([&] { (void)a.any_dim(2); }, "any_dim");
  expect_error<InvalidArgument>([&] { (void)a.all_dim(-3); }, "all_dim");
  expect_error<InvalidArgument>([&] { (void)a.var(2); }, "var");
  expect_error<InvalidArgument>([&] { (void)a.norm_dim(2.0, 2); }, "norm_dim");
  expect_error<InvalidArgument>([&] { (void)a.cumsum(2); }, "cumsum");
  expect_error<InvalidArgument>([&] { (void)a.cumprod(-3); }, "cumprod");
  expect_error<InvalidArgument>([&] { (void)a.cummin(2); }, "cummin");
  expect_error<InvalidArgument>([&] { (void)a.cummax(2); }, "cummax");
  expect_error<InvalidArgument>([&] { (void)a.sort(2); }, "sort");
  expect_error<InvalidArgument>([&] { (void)a.sort_with_indices(2); }, "sort_with_indices");
  expect_error<InvalidArgument>([&] { (void)a.argsort(-3); }, "argsort");
  expect_error<InvalidArgument>([&] { (void)a.topk(1, 2); }, "topk");
}

// The Tensor API rules most wrong kinds out at compile time; the detail layer checks again for
// primitives built at run time.
TEST(ReduceErrors, WrongKind) {
  const Primitive b = Tensor<2, Bool>::full({2, 2}, true, Device::cpu()).primitive();
  const Primitive i = Tensor<2, Int>::ones({2, 2}, Device::cpu()).primitive();
  expect_error<DTypeMismatch>([&] { detail::sum(b); }, "sum");
  expect_error<DTypeMismatch>([&] { detail::sum_dim(b, 0); }, "sum_dim");
  expect_error<DTypeMismatch>([&] { detail::prod(b); }, "prod");
  expect_error<DTypeMismatch>([&] { detail::max(b); }, "max");
  expect_error<DTypeMismatch>([&] { detail::min_dim(b, 0); }, "min_dim");
  expect_error<DTypeMismatch>([&] { detail::argmax(b, 0); }, "argmax");
  expect_error<DTypeMismatch>([&] { detail::max_dim_with_indices(b, 0); }, "max_dim_with_indices");
  expect_error<DTypeMismatch>([&] { detail::mean(i); }, "mean");
  expect_error<DTypeMismatch>([&] { detail::mean_dim(i, 0); }, "mean_dim");
  expect_error<DTypeMismatch>([&] { detail::var_dim(i, 0, 1); }, "var");
  expect_error<DTypeMismatch>([&] { detail::norm(i, 2.0); }, "norm");
  expect_error<DTypeMismatch>([&] { detail::norm_dim(b, 2.0, 0); }, "norm_dim");
  expect_error<DTypeMismatch>([&] { detail::cumsum(b, 0); }, "cumsum");
  expect_error<DTypeMismatch>([&] { detail::cummax(b, 0); }, "cummax");
  expect_error<DTypeMismatch>([&] { detail::sort(b, 0, false); }, "sort");
  expect_error<DTypeMismatch>([&] { detail::argsort(b, 0, false); }, "argsort");
  expect_error<DTypeMismatch>([&] { detail::topk_with_indices(b, 1, 0, true); }, "topk");
  // any/all accept every kind.
  EXPECT_TRUE(detail::into_data(detail::all(b)).to_vec<bool>().at(0));
  EXPECT_TRUE(detail::into_data(detail::any(i)).to_vec<bool>().at(0));
}

TEST(ReduceErrors, TopkKOutOfRange) {
  const auto a = floats();  // [2, 3]
  expect_error<InvalidArgument>([&] { (void)a.topk(4, 1); }, "topk");
  expect_error<InvalidArgument>([&] { (void)a.topk(3, 0); }, "topk");
  expect_error<InvalidArgument>([&] { (void)a.topk_with_indices(-1, 1); }, "topk");
  EXPECT_EQ(a.topk(3, 1).shape(), (Shape{2, 3}));
  EXPECT_EQ(a.topk(0, 1).shape(), (Shape{2, 0}));
}

TEST(ReduceErrors, ExtremaOfNothing) {
  const auto empty = Tensor<2>::zeros({0, 3}, Device::cpu());
  expect_error<InvalidArgument>([&] { (void)empty.max(); }, "max");
  expect_error<InvalidArgument>([&] { (void)empty.min(); }, "min");
  expect_error<InvalidArgument>([&] { (void)empty.max_dim(0); }, "max_dim");
  expect_error<InvalidArgument>([&] { (void)empty.min_dim(-2); }, "min_dim");
  expect_error<InvalidArgument>([&] { (void)empty.argmax(0); }, "argmax");
  expect_error<InvalidArgument>([&] { (void)empty.argmin(0); }, "argmin");
  expect_error<InvalidArgument>([&] { (void)empty.max_dim_with_indices(0); },
                                "max_dim_with_indices");
  expect_error<InvalidArgument>([&] { (void)empty.min_dim_with_indices(0); },
                                "min_dim_with_indices");
  expect_error<InvalidArgument>([&] { (void)empty.norm(INFINITY); }, "norm");
  expect_error<InvalidArgument>([&] { (void)empty.norm_dim(-INFINITY, 0); }, "norm_dim");
  // Along a non-empty dim of an empty tensor the result is simply empty.
  EXPECT_EQ(empty.max_dim(1).shape(), (Shape{0, 1}));
  EXPECT_EQ(empty.argmax(1).shape(), (Shape{0, 1}));
  // Sums, products and means of nothing are defined.
  EXPECT_EQ(empty.sum().into_data().to_vec<float>(), std::vector<float>{0.0f});
  EXPECT_EQ(empty.prod().into_data().to_vec<float>(), std::vector<float>{1.0f});
  EXPECT_TRUE(std::isnan(empty.mean().into_data().to_vec<float>().at(0)));
  EXPECT_EQ(empty.sum_dim(0).into_data().to_vec<float>(), std::vector<float>(3, 0.0f));
}

TEST(ReduceErrors, NormOfNaNOrder) {
  expect_error<InvalidArgument>([&] { (void)floats().norm(NAN); }, "norm");
}

// The backend checks the index dtype it is asked to produce.
TEST(ReduceErrors, BackendRejectsFloatIndexDType) {
  Backend& cpu = backend_for(Device::cpu());
  const Primitive x = floats().primitive();
  expect_error<UnsupportedDType>([&] { cpu.argmax(x, 0, DType::F32); }, "argmax");
  expect_error<UnsupportedDType>([&] { cpu.argsort(x, 0, false, DType::Bool); }, "argsort");
  expect_error<UnsupportedDType>([&] { cpu.topk_with_indices(x, 1, 0, true, DType::F64); },
                                 "topk_with_indices");
}

}  // namespace
}  // namespace kiln::reduce_errors_test
