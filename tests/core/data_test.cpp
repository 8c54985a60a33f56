// TensorData (host bytes + dtype + shape) and Scalar.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <limits>
#include <string>

#include "support/error_message.h"

namespace kiln {
namespace {

using kiln::test::expect_error_containing;

template <class T>
void check_round_trip(std::vector<T> values) {
  const auto n = static_cast<std::int64_t>(values.size());
  const TensorData data = TensorData::from_vec(values, Shape{1, n});
  EXPECT_EQ(data.dtype(), dtype_of_v<T>);
  EXPECT_EQ(data.shape(), (Shape{1, n}));
  EXPECT_EQ(data.num_elements(), n);
  EXPECT_EQ(data.bytes().size(), values.size() * dtype_size(dtype_of_v<T>));
  EXPECT_EQ(data.to_vec<T>(), values);
}

TEST(TensorData, FromVecToVecEveryType) {
  check_round_trip<double>({1.5, -2.25, 1e300});
  check_round_trip<float>({1.5f, -0.0f, 3e38f});
  check_round_trip<std::int64_t>({std::numeric_limits<std::int64_t>::min(), 0, 7});
  check_round_trip<std::int32_t>({-5, 0, 2147483647});
  check_round_trip<std::int16_t>({-32768, 1, 32767});
  check_round_trip<std::int8_t>({-128, 0, 127});
  check_round_trip<std::uint64_t>({0, 1, std::numeric_limits<std::uint64_t>::max()});
  check_round_trip<std::uint32_t>({0, 4294967295u, 3});
  check_round_trip<std::uint16_t>({0, 65535, 9});
  check_round_trip<std::uint8_t>({0, 255, 17});
  check_round_trip<bool>({true, false, true});
}

TEST(TensorData, HalfTypesRoundTrip) {
  const std::vector<half> h{half(1.0f), half(-0.5f), half(65504.0f)};
  const auto data = TensorData::from_vec(h, Shape{3});
  EXPECT_EQ(data.dtype(), DType::F16);
  EXPECT_EQ(data.to_f64_vec(), (std::vector<double>{1.0, -0.5, 65504.0}));
  const std::vector<bfloat16> b{bfloat16(2.0f), bfloat16(-3.0f)};
  EXPECT_EQ(TensorData::from_vec(b).dtype(), DType::BF16);
  EXPECT_EQ(TensorData::from_vec(b).to_f64_vec(), (std::vector<double>{2.0, -3.0}));
}

TEST(TensorData, BoolIsStoredAsOneByteZeroOrOne) {
  const auto data = TensorData::from_vec(std::vector<bool>{true, false, true}, Shape{3});
  EXPECT_EQ(data.dtype(), DType::Bool);
  ASSERT_EQ(data.bytes().size(), 3u);
  EXPECT_EQ(data.bytes()[0], std::byte{1});
  EXPECT_EQ(data.bytes()[1], std::byte{0});
  EXPECT_EQ(data.to_f64_vec(), (std::vector<double>{1, 0, 1}));
}

TEST(TensorData, ToVecOfTheWrongTypeThrowsDTypeMismatch) {
  const auto data = TensorData::from_vec(std::vector<float>{1, 2}, Shape{2});
  expect_error_containing<DTypeMismatch>([&] { (void)data.to_vec<double>(); },
                                         {"[TensorData::to_vec]"});
  expect_error_containing<DTypeMismatch>([&] { (void)data.to_vec<std::int32_t>(); }, {"f32"});
  expect_error_containing<DTypeMismatch>([&] { (void)data.as_span<std::uint32_t>(); },
                                         {"[TensorData::to_vec]"});
  const auto flags = TensorData::from_vec(std::vector<bool>{true}, Shape{1});
  expect_error_containing<DTypeMismatch>([&] { (void)flags.to_vec<std::uint8_t>(); }, {"bool"});
}

TEST(TensorData, CountAndShapeMustAgree) {
  expect_error_containing<ShapeMismatch>(
      [] {
        (void)TensorData::from_vec(std::vector<float>{1, 2, 3}, Shape{2, 2});
      },
      {"[TensorData::from_vec]"});
  expect_error_containing<ShapeMismatch>(
      [] { (void)TensorData::from_vec(std::vector<float>{}, Shape{-1}); }, {"negative"});
  expect_error_containing<ShapeMismatch>(
      [] { (void)TensorData(std::vector<std::byte>(7), Shape{2}, DType::F32); }, {"[TensorData]"});
  EXPECT_NO_THROW((void)TensorData(std::vector<std::byte>(8), Shape{2}, DType::F32));
}

TEST(TensorData, EmptyAndZeroSized) {
  const auto data = TensorData::from_vec(std::vector<float>{}, Shape{0, 3});
  EXPECT_EQ(data.num_elements(), 0);
  EXPECT_TRUE(data.to_vec<float>().empty());
  EXPECT_TRUE(data.convert(DType::I8).to_vec<std::int8_t>().empty());
}

TEST(TensorData, Full) {
  const auto data = TensorData::full(Shape{2, 2}, 3.0, DType::I16);
  EXPECT_EQ(data.to_vec<std::int16_t>(), (std::vector<std::int16_t>{3, 3, 3, 3}));
  EXPECT_EQ(TensorData::full(Shape{1}, 0.5, DType::BF16).to_f64_vec(), std::vector<double>{0.5});
}

// Values every dtype can hold exactly, so any pair of conversions keeps them (bool: nonzero ->
// 1, which these values are chosen to survive too: 0 stays 0, 1 stays 1).
TEST(TensorData, ConvertBetweenEveryDTypePair) {
  const std::vector<double> values{0, 1, 2, 100, 127};
  for (DType from : kAllDTypes) {
    const auto source = TensorData::from_vec(values, Shape{5}).convert(from);
    ASSERT_EQ(source.dtype(), from);
    for (DType to : kAllDTypes) {
      const TensorData out = source.convert(to);
      ASSERT_EQ(out.dtype(), to);
      ASSERT_EQ(out.shape(), (Shape{5}));
      std::vector<double> want = values;
      if (from == DType::Bool || to == DType::Bool) {
        for (double& v : want) v = v != 0 ? 1 : 0;
      }
      EXPECT_EQ(out.to_f64_vec(), want) << dtype_name(from) << " -> " << dtype_name(to);
    }
  }
}

TEST(TensorData, ConvertFloatToIntTruncatesTowardZero) {
  const auto data = TensorData::from_vec(std::vector<float>{2.7f, -2.7f, 0.5f, -0.5f}, Shape{4});
  EXPECT_EQ(data.convert(DType::I32).to_vec<std::int32_t>(),
            (std::vector<std::int32_t>{2, -2, 0, 0}));
}

TEST(TensorData, ConvertOutOfRangeAndNanIsDefined) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const auto data = TensorData::from_vec(std::vector<float>{300, -300, nan, inf, -inf}, Shape{5});
  EXPECT_EQ(data.convert(DType::I8).to_vec<std::int8_t>(),
            (std::vector<std::int8_t>{127, -128, 0, 127, -128}));
  EXPECT_EQ(data.convert(DType::U8).to_vec<std::uint8_t>(),
            (std::vector<std::uint8_t>{255, 0, 0, 255, 0}));
  // Float to bool: nonzero (NaN included) is true.
  EXPECT_EQ(data.convert(DType::Bool).to_vec<bool>(),
            (std::vector<bool>{true, true, true, true, true}));
}

TEST(TensorData, ConvertToHalfRoundsToNearestEven) {
  // 1 + 2^-11 is the tie between 1 and 1 + 2^-10 in f16: rounds to the even one, 1.
  const auto data =
      TensorData::from_vec(std::vector<float>{1.0f + std::ldexp(1.0f, -11), 1e6f}, Shape{2});
  const auto h = data.convert(DType::F16).to_f64_vec();
  EXPECT_EQ(h[0], 1.0);
  EXPECT_TRUE(std::isinf(h[1]));
  EXPECT_EQ(data.convert(DType::BF16).to_f64_vec()[0], 1.0);
}

TEST(TensorData, ToStringShowsDTypeShapeAndValues) {
  const std::string text =
      TensorData::from_vec(std::vector<std::int32_t>{1, 2}, Shape{2}).to_string();
  EXPECT_NE(text.find("i32"), std::string::npos) << text;
  EXPECT_NE(text.find("[2]"), std::string::npos) << text;
}

TEST(Scalar, KindsAndConversions) {
  EXPECT_EQ(Scalar(2.5).kind(), Scalar::Kind::Float);
  EXPECT_EQ(Scalar(2.5f).kind(), Scalar::Kind::Float);
  EXPECT_EQ(Scalar(-3).kind(), Scalar::Kind::Int);
  EXPECT_EQ(Scalar(3u).kind(), Scalar::Kind::UInt);
  EXPECT_EQ(Scalar(true).kind(), Scalar::Kind::Bool);
  EXPECT_TRUE(Scalar(1.0).is_float());
  EXPECT_FALSE(Scalar(1).is_float());

  EXPECT_EQ(Scalar(2.5).as<std::int32_t>(), 2);
  EXPECT_EQ(Scalar(-2.5).as<std::int64_t>(), -2);
  EXPECT_EQ(Scalar(2.5).as<double>(), 2.5);
  EXPECT_EQ(Scalar(7).as<float>(), 7.0f);
  EXPECT_EQ(Scalar(0.0).as<bool>(), false);
  EXPECT_EQ(Scalar(-0.1).as<bool>(), true);
  EXPECT_EQ(Scalar(true).to_double(), 1.0);
  EXPECT_EQ(Scalar(true).as<std::int8_t>(), 1);
}

TEST(Scalar, LargeIntegersStayExact) {
  constexpr std::uint64_t big = std::numeric_limits<std::uint64_t>::max();
  EXPECT_EQ(Scalar(big).to_uint(), big);
  EXPECT_EQ(Scalar(big).as<std::uint64_t>(), big);
  constexpr std::int64_t low = std::numeric_limits<std::int64_t>::min();
  EXPECT_EQ(Scalar(low).to_int(), low);
  EXPECT_EQ(Scalar(low).as<std::int64_t>(), low);
  // 2^53 + 1 is not a double, but an integer scalar keeps it.
  const std::int64_t odd = (std::int64_t{1} << 53) + 1;
  EXPECT_EQ(Scalar(odd).as<std::int64_t>(), odd);
}

TEST(Scalar, NanDoesNotBecomeAnInteger) {
  const Scalar nan(std::numeric_limits<double>::quiet_NaN());
  EXPECT_TRUE(std::isnan(nan.to_double()));
  EXPECT_EQ(nan.to_int(), 0);
  EXPECT_TRUE(nan.to_bool());
}

}  // namespace
}  // namespace kiln
