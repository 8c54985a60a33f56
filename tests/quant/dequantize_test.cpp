// Decoding every GGUF block kind against the float64 reference of its formula. Each reference
// value is exact in float64 and rounds once to float, as the one product (and sum) of the
// reference decoder does, so kiln's values must equal it bit for bit.
#include <gtest/gtest.h>
#include <kiln/data.h>
#include <kiln/quant.h>

#include <bit>
#include <random>

#include "quant/block_reference.h"

namespace kiln {
namespace {

using quant_testing::Kind;

constexpr Kind kGgufKinds[] = {Kind::Q4_0, Kind::Q4_1, Kind::Q5_0, Kind::Q5_1,
                               Kind::Q8_0, Kind::Q2_K, Kind::Q3_K, Kind::Q4_K,
                               Kind::Q5_K, Kind::Q6_K, Kind::Q8_K};

class Dequantize : public ::testing::TestWithParam<Kind> {};

TEST_P(Dequantize, EqualsTheFloat64FormulaBitForBit) {
  const Kind kind = GetParam();
  const quant_testing::Layout layout = quant_testing::layout(kind);
  std::mt19937 rng(1234 + static_cast<int>(kind));
  for (int rows : {1, 3}) {
    for (int blocks_per_row : {1, 2, 5}) {
      const int blocks = rows * blocks_per_row;
      std::vector<std::byte> bytes = quant_testing::random_blocks(kind, blocks, rng);
      const TensorData data = TensorData::quantized(
          bytes, Shape{rows, static_cast<std::int64_t>(blocks_per_row) * layout.values},
          quant_scheme(kind));
      const std::vector<float> got = data.dequantize().to_vec<float>();
      ASSERT_EQ(got.size(), static_cast<std::size_t>(blocks) * layout.values);
      for (int b = 0; b < blocks; ++b) {
        const std::vector<double> want = quant_testing::reference_block(
            kind, bytes.data() + static_cast<std::ptrdiff_t>(b) * layout.bytes);
        for (int j = 0; j < layout.values; ++j) {
          const float expected = static_cast<float>(want[j]);
          const float actual = got[static_cast<std::size_t>(b) * layout.values + j];
          ASSERT_EQ(std::bit_cast<std::uint32_t>(actual), std::bit_cast<std::uint32_t>(expected))
              << quant_kind_name(kind) << " block " << b << " value " << j << ": " << actual
              << " vs " << expected;
        }
      }
    }
  }
}

TEST_P(Dequantize, KeepsTheShapeOfEmptyData) {
  const Kind kind = GetParam();
  const std::int64_t values = quant_testing::layout(kind).values;
  for (const Shape& shape : {Shape{0, values}, Shape{3, 0}, Shape{2, 0, values}}) {
    const TensorData data = TensorData::quantized({}, shape, quant_scheme(kind));
    const TensorData f = data.dequantize();
    EXPECT_EQ(f.dtype(), DType::F32);
    EXPECT_EQ(f.shape(), shape);
    EXPECT_EQ(f.num_elements(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, Dequantize, ::testing::ValuesIn(kGgufKinds),
                         [](const auto& info) { return std::string(quant_kind_name(info.param)); });

}  // namespace
}  // namespace kiln
