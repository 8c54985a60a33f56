// Tensor::fake_quantize (src/tensor/quantized.cpp): the values are the blocks' float64 decoding
// in the input's dtype; the gradient passes straight through; on the plain, fused, autodiff and
// fused autodiff CPU devices, with views, empty tensors and every float dtype; and the errors.
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/quant.h>

#include <cmath>
#include <cstring>
#include <random>

#include "support/error_message.h"
#include "tensor/quantized_values.h"

namespace kiln {
namespace {

using Kind = QuantScheme::Kind;
using test::expect_error;
using namespace quantized_values;

// values encoded by the host encoder, then decoded by the float64 reference.
std::vector<double> decoded(const std::vector<float>& values, const Shape& shape,
                            const QuantScheme& scheme) {
  return reference_values(TensorData::from_vec(values, shape).quantize(scheme));
}

TEST(FakeQuantize, ValuesAreTheDecodedBlocks) {
  const Shape shape{3, 256};
  const std::vector<float> values = normal(shape.num_elements(), 21, 2.0f);
  for (const QuantScheme& scheme :
       {quant_scheme(Kind::Q8_0), quant_scheme(Kind::Q4_0), quant_scheme(Kind::Q4_1),
        quant_scheme(Kind::Q5_0), quant_scheme(Kind::Q5_1), quant_scheme(Kind::Q4_K),
        quant_scheme(Kind::Q6_K), int8_channel_scheme(), int8_block_scheme(64)}) {
    const std::vector<double> want = decoded(values, shape, scheme);
    for (const Device& device : devices()) {
      const TensorData got = Tensor<2>::from_data(TensorData::from_vec(values, shape), device)
                                 .fake_quantize(scheme)
                                 .into_data();
      EXPECT_EQ(got.dtype(), DType::F32);
      expect_values(got, want, 1e-6,
                    device.to_string() + " " + std::string(quant_kind_name(scheme.kind)));
    }
  }
}

// The result keeps the input's dtype; the blocks are made from its values (f64 rounded to f32
// first, bf16 and f16 widened), and the decoded values rounded to it.
TEST(FakeQuantize, KeepsEveryFloatDType) {
  const Shape shape{2, 64};
  const std::vector<float> values = normal(shape.num_elements(), 22);
  const QuantScheme q4 = quant_scheme(Kind::Q4_0);
  for (DType dtype : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    const auto x =
        Tensor<2>::from_data(TensorData::from_vec(values, shape), Device::cpu()).cast(dtype);
    const std::vector<float> rounded = x.cast(DType::F32).into_data().to_vec<float>();
    const TensorData got = x.fake_quantize(q4).into_data();
    EXPECT_EQ(got.dtype(), dtype);
    const double tolerance = dtype == DType::BF16 ? 1.0 / 128 : dtype == DType::F16 ? 1e-3 : 1e-6;
    expect_values(got, decoded(rounded, shape, q4), tolerance, std::string(dtype_name(dtype)));
  }
}

// A transposed or sliced view is fake-quantized along its own last dim, as quantize would.
TEST(FakeQuantize, ViewsAreQuantizedAlongTheirLastDim) {
  const std::vector<float> values = normal(64 * 96, 23);
  const QuantScheme q8 = quant_scheme(Kind::Q8_0);
  for (const Device& device : devices()) {
    const auto x = Tensor<2>::from_data(TensorData::from_vec(values, {96, 64}), device);
    const Tensor<2> view = x.transpose().slice({{8, 40}});  // [32, 96], strided
    const TensorData plain = view.into_data();
    expect_values(view.fake_quantize(q8).into_data(),
                  decoded(plain.to_vec<float>(), plain.shape(), q8), 1e-6, device.to_string());
  }
}

TEST(FakeQuantize, EmptyTensors) {
  for (const Device& device : devices()) {
    for (const Shape& shape : {Shape{0, 32}, Shape{3, 0}}) {
      const Tensor<2> y = Tensor<2>::zeros(shape, device).fake_quantize(quant_scheme(Kind::Q8_0));
      EXPECT_EQ(y.shape(), shape);
      EXPECT_EQ(y.dtype(), DType::F32);
    }
  }
}

// The straight-through estimator: d(sum(c * fake_quantize(x)))/dx = c, and the tracked result's
// values are the untracked result's, bit for bit.
TEST(FakeQuantize, GradientPassesStraightThrough) {
  const Shape shape{4, 32};
  const std::vector<float> values = normal(shape.num_elements(), 24);
  const std::vector<float> weights = normal(shape.num_elements(), 25);
  const QuantScheme q4 = quant_scheme(Kind::Q4_0);
  for (const Device& device : {Device::cpu().autodiff(), Device::cpu().fused().autodiff()}) {
    const auto x = Tensor<2>::from_data(TensorData::from_vec(values, shape), device).require_grad();
    const auto c = Tensor<2>::from_data(TensorData::from_vec(weights, shape), device);
    const Tensor<2> y = x.fake_quantize(q4);
    EXPECT_TRUE(y.is_require_grad());
    EXPECT_EQ(y.into_data().to_vec<float>(),
              x.detach().fake_quantize(q4).into_data().to_vec<float>())
        << device;
    const Gradients grads = (y * c).sum().backward();
    EXPECT_EQ(x.grad(grads)->into_data().to_vec<float>(), weights) << device;
  }
}

TEST(FakeQuantize, ErrorsNameTheOpAndTheValues) {
  const Device device = Device::cpu();
  const QuantScheme q8 = quant_scheme(Kind::Q8_0);
  const auto ints = Tensor<2, Int>::zeros({2, 32}, device);
  expect_error<DTypeMismatch>([&] { (void)detail::fake_quantize(ints.primitive(), q8); },
                              "fake_quantize", {"float", "i64"});
  expect_error<ShapeMismatch>(
      [&] {
        (void)Tensor<2>::zeros({2, 33}, device).fake_quantize(q8);
      },
      "fake_quantize", {"[2, 33]", "32"});
  expect_error<UnsupportedOperation>(
      [&] {
        (void)Tensor<2>::zeros({1, 256}, device).fake_quantize(quant_scheme(Kind::Q3_K));
      },
      "fake_quantize", {"Q3_K"});
  expect_error<InvalidArgument>(
      [&] {
        (void)Tensor<2>::full({1, 32}, INFINITY, device).fake_quantize(q8);
      },
      "quantize", {"inf"});
  expect_error<InvalidArgument>(
      [&] {
        (void)Tensor<2>::zeros({1, 32}, device).fake_quantize(QuantScheme{Kind::Q8_0, 16});
      },
      "fake_quantize", {"block size 32", "16"});
}

}  // namespace
}  // namespace kiln
