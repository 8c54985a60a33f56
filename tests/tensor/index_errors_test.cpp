// Error paths of the indexing and joining ops: each throws its typed error, naming the op.
// (Device mismatches need a second device; the conformance table covers them where one exists.)
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <string>

#include "support/devices.h"
#include "support/error_message.h"

using namespace kiln;

namespace {

using kiln::test::kCpu;

using kiln::test::expect_error;

Tensor<2> matrix() {
  return Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}),
                              kCpu);
}

Tensor<2, Int> int_matrix(std::vector<std::int64_t> v, Shape shape) {
  return Tensor<2, Int>::from_data(TensorData::from_vec(v, std::move(shape)), kCpu);
}

Tensor<1, Int> int_vector(std::vector<std::int64_t> v) {
  return Tensor<1, Int>::from_data(TensorData::from_vec(v), kCpu);
}

}  // namespace

TEST(IndexErrors, OutOfRangeIndicesNameOpIndexAndSize) {
  auto x = matrix();
  expect_error<InvalidArgument>(
      [&] {
        x.gather(1, int_matrix({0, 3, 1, 2, 0, 1}, {2, 3})).into_data();
      },
      "gather", {"index 3"});
  expect_error<InvalidArgument>(
      [&] {
        x.gather(0, int_matrix({0, -1, 1}, {1, 3})).into_data();
      },
      "gather", {"index -1"});
  expect_error<InvalidArgument>(
      [&] {
        x.scatter(0, int_matrix({2, 0, 1}, {1, 3}), Tensor<2>::ones({1, 3}, kCpu)).into_data();
      },
      "scatter", {"size 2"});
  expect_error<InvalidArgument>(
      [&] {
        x.scatter_add(1, int_matrix({-5}, {1, 1}), Tensor<2>::ones({1, 1}, kCpu)).into_data();
      },
      "scatter", {"index -5"});
  expect_error<InvalidArgument>(
      [&] {
        x.select(1, int_vector({0, 3})).into_data();
      },
      "select", {"index 3"});
  expect_error<InvalidArgument>(
      [&] {
        x.select_assign(0, int_vector({7}), Tensor<2>::ones({1, 3}, kCpu)).into_data();
      },
      "select_assign", {"index 7"});
  expect_error<InvalidArgument>(
      [&] {
        x.gather_nd<1>(int_matrix({1, 0, 2, 3}, {2, 2})).into_data();
      },
      "gather_nd", {"index 2"});
  expect_error<InvalidArgument>(
      [&] {
        x.scatter_nd(int_matrix({0, 9}, {1, 2}), Tensor<1>::ones({1}, kCpu)).into_data();
      },
      "scatter_nd", {"index 9"});
}

TEST(IndexErrors, UnsignedIndicesPastTheSignedRange) {
  auto x = matrix();
  auto big = Tensor<2, Int>::from_data(
      TensorData::from_vec(std::vector<std::uint64_t>{0, 1ull << 63, 1}, {1, 3}), kCpu);
  expect_error<InvalidArgument>([&] { x.gather(0, big).into_data(); }, "gather",
                                {"9223372036854775808"});
  auto small = Tensor<2, Int>::from_data(
      TensorData::from_vec(std::vector<std::uint8_t>{0, 200, 1}, {1, 3}), kCpu);
  expect_error<InvalidArgument>([&] { x.gather(0, small).into_data(); }, "gather", {"index 200"});
}

TEST(IndexErrors, IndicesMustBeIntegers) {
  auto x = matrix();
  auto float_indices = Tensor<2>::zeros({2, 3}, kCpu);
  expect_error<DTypeMismatch>([&] { detail::gather(0, x.primitive(), float_indices.primitive()); },
                              "gather");
  expect_error<DTypeMismatch>(
      [&] {
        detail::scatter(0, x.primitive(), float_indices.primitive(), x.primitive(),
                        IndexingUpdate::Assign);
      },
      "scatter");
  auto bool_indices =
      Tensor<1, Bool>::from_data(TensorData::from_vec(std::vector<bool>{true}), kCpu);
  expect_error<DTypeMismatch>([&] { detail::select(x.primitive(), 0, bool_indices.primitive()); },
                              "select");
  expect_error<DTypeMismatch>(
      [&] { detail::gather_nd(x.primitive(), float_indices.primitive(), 1); }, "gather_nd");
}

TEST(IndexErrors, MasksMustBeBool) {
  auto x = matrix();
  expect_error<DTypeMismatch>([&] { detail::mask_fill(x.primitive(), x.primitive(), 0); },
                              "mask_fill");
  expect_error<DTypeMismatch>(
      [&] { detail::mask_where(x.primitive(), x.primitive(), x.primitive()); }, "mask_where");
  expect_error<DTypeMismatch>([&] { detail::mask_select(x.primitive(), x.primitive()); },
                              "mask_select");
  expect_error<DTypeMismatch>([&] { detail::argwhere(x.primitive()); }, "argwhere");
  auto mask = x.greater_elem(2.0);
  auto ints = Tensor<2, Int>::zeros({2, 3}, kCpu);
  expect_error<DTypeMismatch>(
      [&] { detail::mask_where(x.primitive(), mask.primitive(), ints.primitive()); }, "mask_where");
  expect_error<DTypeMismatch>([&] { ints.mask_fill(mask, 0.5); }, "mask_fill");
}

TEST(IndexErrors, ShapeMismatches) {
  auto x = matrix();
  // gather: indices of another rank, or larger than x outside dim.
  expect_error<ShapeMismatch>(
      [&] {
        detail::gather(0, x.primitive(), int_vector({0, 1}).primitive());
      },
      "gather");
  expect_error<ShapeMismatch>([&] { x.gather(0, int_matrix({0, 0, 0, 0}, {1, 4})); }, "gather");
  // scatter: values must have the shape of indices.
  expect_error<ShapeMismatch>(
      [&] {
        x.scatter(0, int_matrix({0, 1, 0}, {1, 3}), Tensor<2>::ones({2, 3}, kCpu));
      },
      "scatter");
  // select: 1-D indices only; select_assign values must match.
  expect_error<ShapeMismatch>(
      [&] {
        detail::select(x.primitive(), 0, int_matrix({0}, {1, 1}).primitive());
      },
      "select");
  expect_error<ShapeMismatch>(
      [&] {
        x.select_assign(1, int_vector({0, 1}), Tensor<2>::ones({2, 3}, kCpu));
      },
      "select_assign");
  // gather_nd / scatter_nd: k larger than the rank, wrong result rank, wrong values shape.
  expect_error<ShapeMismatch>([&] { x.gather_nd<1>(int_matrix({0, 0, 0}, {1, 3})); }, "gather_nd");
  expect_error<ShapeMismatch>([&] { x.gather_nd<2>(int_matrix({0, 0}, {1, 2})); }, "gather_nd");
  expect_error<ShapeMismatch>(
      [&] {
        x.scatter_nd(int_matrix({0}, {1, 1}), Tensor<2>::ones({1, 2}, kCpu));
      },
      "scatter_nd");
  // slice_assign: values must fit the region.
  expect_error<ShapeMismatch>(
      [&] {
        x.slice_assign({Slice(0, 1), Slice(0, 2)}, Tensor<2>::ones({1, 3}, kCpu));
      },
      "slice_assign");
  // mask ops broadcast.
  auto mask = Tensor<2, Bool>::from_data(
      TensorData::from_vec(std::vector<bool>{true, false}, {1, 2}), kCpu);
  expect_error<ShapeMismatch>([&] { x.mask_fill(mask, 0); }, "mask_fill");
  expect_error<ShapeMismatch>([&] { x.mask_where(mask, x); }, "mask_where");
  expect_error<ShapeMismatch>([&] { x.mask_select(mask); }, "mask_select");
}

TEST(IndexErrors, DimsAndArguments) {
  auto x = matrix();
  expect_error<InvalidArgument>([&] { x.gather(2, int_matrix({0}, {1, 1})); }, "gather");
  expect_error<InvalidArgument>([&] { x.select(-3, int_vector({0})); }, "select");
  expect_error<InvalidArgument>([&] { x.slice({Slice(0, 1, 0)}); }, "slice");
  expect_error<InvalidArgument>(
      [&] {
        x.slice_assign({Slice(0, 2), Slice(0, 2), Slice(0, 1)}, x);
      },
      "slice_assign");
  expect_error<InvalidArgument>([&] { x.slice_fill({Slice(0, 2, 0)}, 1.0); }, "slice_fill");
  expect_error<DTypeMismatch>(
      [&] {
        Tensor<2, Int>::zeros({2, 2}, kCpu).slice_fill({}, 0.5);
      },
      "slice_fill");
  expect_error<InvalidArgument>([&] { x.repeat_dim(0, -1); }, "repeat_dim");
  expect_error<InvalidArgument>([&] { x.repeat({1, -2}); }, "repeat");
  expect_error<InvalidArgument>([&] { x.chunk(0, 1); }, "chunk");
  expect_error<InvalidArgument>([&] { x.split(0, 1); }, "split");
  expect_error<InvalidArgument>([&] { x.split_with_sizes({1, 1}, 1); }, "split_sizes");
  expect_error<InvalidArgument>([&] { x.split_with_sizes({4, -1}, 1); }, "split_sizes");
}

TEST(IndexErrors, CatAndStack) {
  auto x = matrix();
  expect_error<InvalidArgument>([&] { Tensor<2>::cat({}, 0); }, "cat", {"empty"});
  expect_error<InvalidArgument>([&] { Tensor<2>::stack({}, 0); }, "stack", {"empty"});
  expect_error<ShapeMismatch>(
      [&] {
        Tensor<2>::cat({x, Tensor<2>::ones({2, 2}, kCpu)}, 0);
      },
      "cat", {"tensor 1"});
  expect_error<ShapeMismatch>(
      [&] {
        Tensor<2>::stack({x, Tensor<2>::ones({2, 2}, kCpu)}, 0);
      },
      "stack");
  expect_error<ShapeMismatch>(
      [&] {
        detail::cat({x.primitive(), Tensor<1>::ones({3}, kCpu).primitive()}, 0);
      },
      "cat");
  expect_error<InvalidArgument>([&] { Tensor<2>::cat({x, x}, 2); }, "cat");
  expect_error<InvalidArgument>([&] { Tensor<2>::stack({x, x}, 3); }, "stack");
  expect_error<DTypeMismatch>(
      [&] {
        detail::cat({x.primitive(), Tensor<2, Int>::ones({2, 3}, kCpu).primitive()}, 0);
      },
      "cat");
}

TEST(IndexErrors, ValuesOfAnotherKindAreRejected) {
  auto x = matrix();
  auto ints = Tensor<2, Int>::ones({1, 3}, kCpu);
  expect_error<DTypeMismatch>(
      [&] {
        detail::scatter(0, x.primitive(), int_matrix({0, 1, 0}, {1, 3}).primitive(),
                        ints.primitive(), IndexingUpdate::Assign);
      },
      "scatter");
  expect_error<DTypeMismatch>(
      [&] { detail::slice_assign(x.primitive(), {Slice(0, 1)}, ints.primitive()); },
      "slice_assign");
}
