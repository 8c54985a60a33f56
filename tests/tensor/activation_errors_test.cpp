// Error paths of the activation functions: wrong kind, dim out of range, alpha that does not
// broadcast to the input. Each throws the typed error with a message naming the op.
#include <gtest/gtest.h>
#include <kiln/activation.h>
#include <kiln/kiln.h>

#include <functional>
#include <string>

#include "support/error_message.h"

namespace kiln {
namespace {

using kiln::test::expect_error;

Primitive ints() {
  return detail::from_data(TensorData::from_vec(std::vector<std::int32_t>{1, -2, 3, 4}, {2, 2}),
                           Device::cpu(), Kind::Int, 2);
}
Primitive floats(Shape shape = {2, 2}) {
  const std::vector<float> values(static_cast<std::size_t>(shape.num_elements()), 0.5f);
  return detail::from_data(TensorData::from_vec(values, shape), Device::cpu(), Kind::Float,
                           shape.rank());
}

TEST(ActivationErrors, IntegerInputsAreRejected) {
  expect_error<DTypeMismatch>([] { detail::relu(ints()); }, "relu");
  expect_error<DTypeMismatch>([] { detail::gelu(ints()); }, "gelu");
  expect_error<DTypeMismatch>([] { detail::silu(ints()); }, "silu");
  expect_error<DTypeMismatch>([] { detail::leaky_relu(ints(), 0.1); }, "leaky_relu");
  expect_error<DTypeMismatch>([] { detail::hard_sigmoid(ints(), 0.2, 0.5); }, "hard_sigmoid");
  expect_error<DTypeMismatch>([] { detail::log_sigmoid(ints()); }, "log_sigmoid");
  expect_error<DTypeMismatch>([] { detail::softmax(ints(), 0); }, "softmax");
  expect_error<DTypeMismatch>([] { detail::log_softmax(ints(), 0); }, "log_softmax");
  expect_error<DTypeMismatch>([] { detail::softmin(ints(), 0); }, "softmin");
  expect_error<DTypeMismatch>([] { detail::prelu(ints(), floats()); }, "prelu");
  expect_error<DTypeMismatch>([] { detail::prelu(floats(), ints()); }, "prelu");
}

TEST(ActivationErrors, DimOutOfRange) {
  expect_error<InvalidArgument>([] { detail::softmax(floats(), 2); }, "softmax");
  expect_error<InvalidArgument>([] { detail::log_softmax(floats(), -3); }, "log_softmax");
  expect_error<InvalidArgument>([] { detail::softmin(floats(), 5); }, "softmin");
}

Primitive targets(std::vector<std::int64_t> values, Shape shape) {
  return detail::from_data(TensorData::from_vec(std::move(values), shape), Device::cpu(), Kind::Int,
                           shape.rank());
}

TEST(ActivationErrors, SoftmaxCrossEntropyTakesRowsOfLogitsAndATargetPerRow) {
  const char* op = "softmax_cross_entropy";
  expect_error<ShapeMismatch>(
      [] {
        detail::softmax_cross_entropy(floats(), targets({0, 1, 0}, {3}));
      },
      op, {"[2, 2]", "[3]"});
  expect_error<ShapeMismatch>(
      [] {
        detail::softmax_cross_entropy(floats(), targets({0, 1}, {1, 2}));
      },
      op);
  expect_error<ShapeMismatch>(
      [] {
        detail::softmax_cross_entropy(floats({2, 2, 1}), targets({0, 1}, {2}));
      },
      op);
  expect_error<DTypeMismatch>([] { detail::softmax_cross_entropy(floats(), floats({2})); }, op);
  expect_error<DTypeMismatch>(
      [] {
        detail::softmax_cross_entropy(ints(), targets({0, 1}, {2}));
      },
      op);
  expect_error<InvalidArgument>(
      [] {
        detail::softmax_cross_entropy(floats({2, 0}), targets({0, 0}, {2}));
      },
      op, {"no classes"});
  // A target outside the classes is the gather's error, named as such.
  expect_error<Error>(
      [] {
        detail::softmax_cross_entropy(floats(), targets({0, 2}, {2}));
      },
      "gather");
}

TEST(ActivationErrors, PreluAlphaMustBroadcastToInput) {
  expect_error<ShapeMismatch>([] { detail::prelu(floats({2, 2}), floats({1, 3})); }, "prelu");
  expect_error<ShapeMismatch>([] { detail::prelu(floats({1, 2}), floats({3, 2})); }, "prelu");
  expect_error<ShapeMismatch>([] { detail::prelu(floats({2, 2}), floats({2})); }, "prelu");
}

TEST(ActivationErrors, PublicApiWorks) {
  // The public wrappers reach the same functions (a smoke test of include/kiln/activation.h).
  auto x = Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{-1, 0, 2, -3}, {2, 2}),
                                Device::cpu());
  EXPECT_EQ(activation::relu(x).into_data().to_vec<float>(), (std::vector<float>{0, 0, 2, 0}));
  const auto s = activation::softmax(x, -1).into_data().to_vec<float>();
  EXPECT_NEAR(s[0] + s[1], 1.0f, 1e-6f);
  EXPECT_NEAR(s[2] + s[3], 1.0f, 1e-6f);
  EXPECT_GT(s[2], 0.99f);
}

}  // namespace
}  // namespace kiln
