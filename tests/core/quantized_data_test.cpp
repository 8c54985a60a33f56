// TensorData holding QFloat: construction checks, the scheme, conversions and error paths.
#include <gtest/gtest.h>
#include <kiln/data.h>
#include <kiln/quant.h>
#include <kiln/tensor.h>

#include "support/error_message.h"

namespace kiln {
namespace {

using Kind = QuantScheme::Kind;

// f throws E with a message that starts with an op in brackets and contains text.
template <class E, class F>
void expect_message(F&& f, const std::string& text) {
  const std::string message = test::message_of<E>(std::forward<F>(f));
  EXPECT_EQ(message.rfind('[', 0), 0u) << message;
  EXPECT_NE(message.find(text), std::string::npos) << message;
}

TEST(QuantizedData, ByteCountsFollowTheScheme) {
  EXPECT_EQ(quantized_bytes(Shape{4, 64}, quant_scheme(Kind::Q8_0)), 4u * 2 * 34);
  EXPECT_EQ(quantized_bytes(Shape{2, 256}, quant_scheme(Kind::Q6_K)), 2u * 210);
  EXPECT_EQ(quantized_bytes(Shape{3, 10}, int8_channel_scheme()), 3u * 14);
  EXPECT_EQ(quantized_bytes(Shape{3, 10}, int8_block_scheme(5)), 6u * 9);
  EXPECT_EQ(quantized_bytes(Shape{0, 64}, quant_scheme(Kind::Q4_0)), 0u);
  EXPECT_EQ(quantized_bytes(Shape{5, 0}, int8_channel_scheme()), 0u);
}

TEST(QuantizedData, RefusesBadShapesAndCounts) {
  const QuantScheme q8 = quant_scheme(Kind::Q8_0);
  expect_message<ShapeMismatch>(
      [&] { (void)TensorData::quantized(std::vector<std::byte>(34), Shape{33}, q8); },
      "not a multiple of Q8_0's 32 values per block");
  expect_message<ShapeMismatch>(
      [&] { (void)TensorData::quantized(std::vector<std::byte>(33), Shape{32}, q8); },
      "33 bytes given but shape [32] in Q8_0 needs 34");
  expect_message<ShapeMismatch>(
      [&] { (void)TensorData::quantized(std::vector<std::byte>(34), Shape{}, q8); },
      "at least one dim");
  EXPECT_THROW((void)TensorData::quantized({}, Shape{-1, 32}, q8), InvalidArgument);
  EXPECT_THROW(
      (void)TensorData::quantized({}, Shape{std::int64_t{1} << 40, std::int64_t{1} << 40}, q8),
      InvalidArgument);  // past kiln's 2^48 elements
  expect_message<UnsupportedDType>(
      [&] { (void)TensorData(std::vector<std::byte>(4), Shape{4}, DType::QFloat); },
      "TensorData::quantized");
}

TEST(QuantizedData, RefusesMalformedSchemes) {
  expect_message<InvalidArgument>(
      [&] {
        (void)quantized_bytes(Shape{32}, QuantScheme{Kind::Q8_0, 16});
      },
      "Q8_0 has block size 32, got 16");
  expect_message<InvalidArgument>(
      [&] {
        (void)quantized_bytes(Shape{32}, QuantScheme{static_cast<Kind>(99), 32});
      },
      "unknown quantization kind 99");
  expect_message<InvalidArgument>([&] { (void)int8_block_scheme(0); }, "in [1, 1048576], got 0");
  EXPECT_THROW((void)int8_block_scheme(std::int64_t{1} << 21), InvalidArgument);
  EXPECT_THROW((void)quant_scheme(Kind::Int8Block), InvalidArgument);
  EXPECT_THROW((void)quantized_bytes(Shape{8}, QuantScheme{Kind::Int8Channel, 8}), InvalidArgument);
}

TEST(QuantizedData, SchemeAndDequantizeNeedQFloat) {
  const TensorData f = TensorData::from_vec(std::vector<float>(32, 1.0f), Shape{32});
  expect_message<DTypeMismatch>([&] { (void)f.scheme(); }, "only qfloat data has a scheme");
  expect_message<DTypeMismatch>([&] { (void)f.dequantize(); }, "the data is f32, not qfloat");
  const TensorData i = TensorData::from_vec(std::vector<std::int32_t>(32, 1), Shape{32});
  EXPECT_THROW((void)i.quantize(quant_scheme(Kind::Q8_0)), DTypeMismatch);
  expect_message<ShapeMismatch>([&] { (void)f.quantize(quant_scheme(Kind::Q4_K)); },
                                "not a multiple of Q4_K's 256");
  const TensorData k = TensorData::from_vec(std::vector<float>(256, 1.0f), Shape{256});
  expect_message<UnsupportedOperation>([&] { (void)k.quantize(quant_scheme(Kind::Q5_K)); },
                                       "decodes Q5_K but does not encode it");
  expect_message<UnsupportedDType>([&] { (void)f.convert(DType::QFloat); }, "quantize(scheme)");
}

TEST(QuantizedData, RefusesNonFiniteValues) {
  std::vector<float> values(32, 1.0f);
  values[7] = std::numeric_limits<float>::quiet_NaN();
  expect_message<InvalidArgument>(
      [&] { (void)TensorData::from_vec(values, Shape{32}).quantize(quant_scheme(Kind::Q4_0)); },
      "at flat index 7");
  values[7] = std::numeric_limits<float>::infinity();
  EXPECT_THROW((void)TensorData::from_vec(values, Shape{32}).quantize(int8_channel_scheme()),
               InvalidArgument);
}

TEST(QuantizedData, ConvertsThroughDequantization) {
  std::vector<double> values(64);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i) - 30.5;
  const TensorData q =
      TensorData::from_vec(values, Shape{2, 32}).quantize(quant_scheme(Kind::Q8_0));
  const TensorData f = q.dequantize();
  EXPECT_EQ(q.to_f64_vec(), f.to_f64_vec());
  EXPECT_EQ(q.convert(DType::F64).to_f64_vec(), f.to_f64_vec());
  EXPECT_EQ(q.convert(DType::F16).to_f64_vec(), f.convert(DType::F16).to_f64_vec());
  EXPECT_NE(q.to_string().find("qfloat Q8_0"), std::string::npos) << q.to_string();
  EXPECT_EQ(q.num_elements(), 64);
  EXPECT_EQ(q.convert(DType::QFloat == q.dtype() ? DType::QFloat : DType::F32).bytes().size(),
            q.bytes().size());
}

// The CPU holds QFloat data as it is (tests/tensor/quantized_test.cpp has the rest).
TEST(QuantizedData, TheCpuKeepsQFloatData) {
  const TensorData q = TensorData::from_vec(std::vector<float>(64, 0.5f), Shape{2, 32})
                           .quantize(quant_scheme(Kind::Q8_0));
  const TensorData back = Tensor<2>::from_data(q, Device::cpu()).into_data();
  EXPECT_EQ(back.dtype(), DType::QFloat);
  EXPECT_TRUE(
      std::equal(back.bytes().begin(), back.bytes().end(), q.bytes().begin(), q.bytes().end()));
}

}  // namespace
}  // namespace kiln
