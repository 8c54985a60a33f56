// Error paths of the linalg family: each wrong kind, dtype, shape, dim or value throws the typed
// kiln::Error naming the op.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <string>

#include "runtime/registry.h"
#include "support/error_message.h"
#include "tensor/common.h"

namespace kiln {
namespace {

Primitive filled(const Shape& shape, DType dtype, double value = 1.0) {
  std::vector<double> values(static_cast<std::size_t>(shape.num_elements()), value);
  const Kind kind = is_float(dtype) ? Kind::Float : (is_int(dtype) ? Kind::Int : Kind::Bool);
  return detail::from_data(TensorData::from_vec(values, shape).convert(dtype), Device::cpu(), kind,
                           shape.rank());
}
Primitive f32(const Shape& shape) { return filled(shape, DType::F32); }

using kiln::test::expect_error;

TEST(LinalgErrors, MatmulShapes) {
  expect_error<ShapeMismatch>(
      [] {
        detail::matmul(f32({2, 3}), f32({4, 5}));
      },
      "matmul", {"[2, 3]", "[4, 5]"});
  expect_error<ShapeMismatch>(
      [] {
        detail::matmul(f32({2, 3, 4}), f32({3, 4, 5}));
      },
      "matmul", {"[2, 3, 4]", "[3, 4, 5]"});
  expect_error<ShapeMismatch>([] { detail::matmul(f32({3}), f32({3, 2})); }, "matmul", {"[3]"});
  expect_error<ShapeMismatch>([] { detail::matmul(f32({2, 3}), f32({3})); }, "matmul");
}

TEST(LinalgErrors, MatmulKinds) {
  expect_error<DTypeMismatch>(
      [] {
        detail::matmul(filled({2, 2}, DType::Bool), filled({2, 2}, DType::Bool));
      },
      "matmul", {"bool"});
  expect_error<DTypeMismatch>(
      [] {
        detail::matmul(f32({2, 2}), filled({2, 2}, DType::I32));
      },
      "matmul");
}

TEST(LinalgErrors, Cross) {
  expect_error<ShapeMismatch>(
      [] {
        detail::cross(f32({4, 2}), f32({4, 2}), 1);
      },
      "cross", {"size 3"});
  expect_error<ShapeMismatch>([] { detail::cross(f32({4, 3}), f32({5, 3}), 1); }, "cross");
  expect_error<InvalidArgument>([] { detail::cross(f32({4, 3}), f32({4, 3}), 2); }, "cross");
  expect_error<DTypeMismatch>(
      [] { detail::cross(filled({3}, DType::Bool), filled({3}, DType::Bool), 0); }, "cross");
}

TEST(LinalgErrors, Linear) {
  expect_error<ShapeMismatch>(
      [] {
        detail::linear(f32({2, 3}), f32({4, 5}), std::nullopt);
      },
      "linear", {"[2, 3]", "[4, 5]"});
  expect_error<ShapeMismatch>(
      [] {
        detail::linear(f32({2, 3}), f32({3, 5}), f32({4}));
      },
      "linear", {"bias"});
  expect_error<ShapeMismatch>(
      [] {
        detail::linear(f32({2, 3}), f32({3}), std::nullopt);
      },
      "linear", {"weight"});
  expect_error<DTypeMismatch>(
      [] {
        detail::linear(filled({2, 3}, DType::I64), f32({3, 5}), std::nullopt);
      },
      "linear");
}

TEST(LinalgErrors, Norms) {
  expect_error<ShapeMismatch>(
      [] {
        detail::layer_norm(f32({2, 3}), f32({4}), std::nullopt, 1e-5);
      },
      "layer_norm", {"gamma", "[4]"});
  expect_error<ShapeMismatch>(
      [] {
        detail::layer_norm(f32({2, 3}), f32({3}), f32({2}), 1e-5);
      },
      "layer_norm", {"beta"});
  expect_error<InvalidArgument>(
      [] {
        detail::layer_norm(f32({2, 3}), f32({3}), std::nullopt, -1.0);
      },
      "layer_norm", {"epsilon"});
  expect_error<DTypeMismatch>(
      [] {
        detail::layer_norm(filled({2, 3}, DType::I32), f32({3}), std::nullopt, 1e-5);
      },
      "layer_norm");
  expect_error<ShapeMismatch>(
      [] { detail::batch_norm(f32({3}), f32({3}), f32({3}), f32({3}), f32({3}), 1e-5); },
      "batch_norm", {"rank >= 2"});
  expect_error<ShapeMismatch>(
      [] {
        detail::batch_norm(f32({2, 3, 4}), f32({3}), f32({3}), f32({4}), f32({3}), 1e-5);
      },
      "batch_norm", {"mean"});
  expect_error<InvalidArgument>(
      [] {
        detail::batch_norm(f32({2, 3}), f32({3}), f32({3}), f32({3}), f32({3}), std::nan(""));
      },
      "batch_norm", {"epsilon"});
}

TEST(LinalgErrors, Embedding) {
  expect_error<DTypeMismatch>([] { detail::embedding(f32({5, 2}), f32({3})); }, "embedding");
  expect_error<DTypeMismatch>(
      [] {
        detail::embedding(filled({5, 2}, DType::I32), filled({3}, DType::I32));
      },
      "embedding");
  expect_error<ShapeMismatch>(
      [] {
        detail::embedding(f32({5, 2, 1}), filled({3}, DType::I64));
      },
      "embedding", {"weights"});
  expect_error<InvalidArgument>(
      [] {
        detail::into_data(detail::embedding(f32({5, 2}), filled({3}, DType::I64, 5)));
      },
      "embedding", {"5"});
  expect_error<InvalidArgument>(
      [] {
        detail::into_data(detail::embedding(f32({5, 2}), filled({3}, DType::I8, -1)));
      },
      "embedding", {"-1"});
  expect_error<InvalidArgument>(
      [] {
        backend_for(Device::cpu())
            .embedding_backward(f32({5, 2}), f32({3, 2}), filled({3}, DType::U8, 9));
      },
      "embedding_backward", {"9"});
}

TEST(LinalgErrors, Attention) {
  auto q = f32({1, 2, 3, 4}), k = f32({1, 2, 5, 4}), v = f32({1, 2, 5, 6});
  expect_error<ShapeMismatch>(
      [&] {
        detail::attention(f32({2, 3, 4}), k, v, std::nullopt, std::nullopt, {});
      },
      "attention", {"query"});
  expect_error<ShapeMismatch>(
      [&] {
        detail::attention(q, f32({1, 2, 5, 3}), v, std::nullopt, std::nullopt, {});
      },
      "attention", {"[1, 2, 5, 3]"});
  expect_error<ShapeMismatch>(
      [&] {
        detail::attention(q, k, f32({1, 2, 4, 6}), std::nullopt, std::nullopt, {});
      },
      "attention", {"value"});
  expect_error<ShapeMismatch>(
      [&] {
        detail::attention(q, f32({3, 2, 5, 4}), f32({2, 2, 5, 6}), std::nullopt, std::nullopt, {});
      },
      "attention", {"broadcast"});
  expect_error<ShapeMismatch>(
      [&] {
        detail::attention(q, k, v, filled({1, 2, 3, 4}, DType::Bool), std::nullopt, {});
      },
      "attention", {"mask", "[1, 2, 3, 5]"});
  expect_error<ShapeMismatch>(
      [&] {
        detail::attention(q, k, v, std::nullopt, f32({1, 1, 5, 3}), {});
      },
      "attention", {"bias"});
  expect_error<DTypeMismatch>(
      [&] {
        detail::attention(q, k, v, f32({1, 2, 3, 5}), std::nullopt, {});
      },
      "attention");
  expect_error<DTypeMismatch>(
      [&] {
        detail::attention(filled({1, 2, 3, 4}, DType::I32), k, v, std::nullopt, std::nullopt, {});
      },
      "attention");
  expect_error<InvalidArgument>(
      [&] { detail::attention(q, k, v, std::nullopt, std::nullopt, {.scale = std::nan("")}); },
      "attention", {"scale"});
}

}  // namespace
}  // namespace kiln
