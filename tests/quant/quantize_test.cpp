// Encoding float values against float64 references of the encoders' formulas: the scale, and
// each value's code, which may differ from the reference only by one where the reference lands
// within a hair of a rounding boundary (the encoders work in float, as llama.cpp's do).
#include <gtest/gtest.h>
#include <kiln/data.h>
#include <kiln/quant.h>

#include <cmath>
#include <cstring>
#include <random>

#include "quant/block_reference.h"

namespace kiln {
namespace {

using quant_testing::Kind;

// A value's code and its position relative to rounding: `boundary` is the distance of the
// unrounded reference from the nearest rounding boundary.
struct Code {
  int value;
  double boundary;
};

std::vector<float> random_values(std::size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(n);
  for (float& v : values) v = normal(rng);
  return values;
}

// The code a float64 encoder gives x in a block of values (GGUF's legacy kinds and int8).
Code reference_code(Kind kind, const float* block, int n, float x) {
  double amax = 0, extreme = 0, min = block[0], max = block[0];
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(block[j])) {
      amax = std::fabs(block[j]);
      extreme = block[j];
    }
    min = std::min<double>(min, block[j]);
    max = std::max<double>(max, block[j]);
  }
  auto truncated = [](double v, int high) {
    const double frac = v - std::floor(v);
    return Code{static_cast<int>(std::clamp(std::floor(v), 0.0, double(high))),
                std::min(frac, 1 - frac)};
  };
  auto rounded = [](double v) {
    const double frac = std::fabs(v) - std::floor(std::fabs(v));
    return Code{static_cast<int>(std::clamp(std::round(v), -127.0, 127.0)), std::fabs(frac - 0.5)};
  };
  switch (kind) {
    case Kind::Q4_0:
    case Kind::Q5_0: {
      const int half_levels = kind == Kind::Q4_0 ? 8 : 16;
      const double d = extreme / -half_levels;
      return d == 0 ? Code{half_levels, 1}
                    : truncated(x / d + half_levels + 0.5, 2 * half_levels - 1);
    }
    case Kind::Q4_1:
    case Kind::Q5_1: {
      const int levels = kind == Kind::Q4_1 ? 16 : 32;
      const double d = (max - min) / (levels - 1);
      return d == 0 ? Code{0, 1} : truncated((x - min) / d + 0.5, levels - 1);
    }
    default: {  // Q8_0 and the int8 schemes
      const double d = amax / 127;
      return d == 0 ? Code{0, 1} : rounded(x / d);
    }
  }
}

// The code stored for value j of a block.
int stored_code(Kind kind, const std::byte* block, int j, int n) {
  auto nibble = [&](int at) {
    const auto b = static_cast<std::uint8_t>(block[at + j % 16]);
    return j < 16 ? b & 0xf : b >> 4;
  };
  auto high = [&](int at) {
    std::uint32_t bits;
    std::memcpy(&bits, block + at, 4);
    return static_cast<int>((bits >> j) & 1) << 4;
  };
  switch (kind) {
    case Kind::Q4_0:
      return nibble(2);
    case Kind::Q4_1:
      return nibble(4);
    case Kind::Q5_0:
      return nibble(6) | high(2);
    case Kind::Q5_1:
      return nibble(8) | high(4);
    case Kind::Q8_0:
      return static_cast<std::int8_t>(block[2 + j]);
    default:
      (void)n;
      return static_cast<std::int8_t>(block[4 + j]);
  }
}

struct Case {
  QuantScheme scheme;
  std::int64_t row;
};

class Quantize : public ::testing::TestWithParam<Case> {};

TEST_P(Quantize, CodesFollowTheFloat64Formula) {
  const auto [scheme, row] = GetParam();
  std::mt19937 rng(99 + static_cast<int>(scheme.kind));
  for (float scale : {1.0f, 1e-3f, 300.0f}) {
    const std::int64_t rows = 4;
    std::vector<float> values = random_values(static_cast<std::size_t>(rows * row), rng, scale);
    values[3] = 0.0f;  // a zero in a block
    std::fill(values.begin() + row, values.begin() + row + std::min<std::int64_t>(row, 32), 0.0f);
    const TensorData q = TensorData::from_vec(values, Shape{rows, row}).quantize(scheme);
    ASSERT_EQ(q.dtype(), DType::QFloat);
    ASSERT_EQ(q.scheme(), scheme);
    ASSERT_EQ(q.bytes().size(), quantized_bytes(q.shape(), scheme));
    const int n = static_cast<int>(scheme.kind == Kind::Int8Channel ? row : scheme.block_size);
    const std::size_t block_bytes = q.bytes().size() / (values.size() / n);
    int near_ties = 0;
    for (std::size_t b = 0; b < values.size() / n; ++b) {
      const float* block = values.data() + b * n;
      const std::byte* stored = q.bytes().data() + b * block_bytes;
      for (int j = 0; j < n; ++j) {
        const Code want = reference_code(scheme.kind, block, n, block[j]);
        const int got = stored_code(scheme.kind, stored, j, n);
        if (want.boundary < 1e-4) {
          ++near_ties;
          EXPECT_LE(std::abs(got - want.value), 1);
        } else {
          ASSERT_EQ(got, want.value) << quant_kind_name(scheme.kind) << " block " << b << " value "
                                     << j << " = " << block[j];
        }
      }
    }
    EXPECT_LT(near_ties, 5);
  }
}

TEST_P(Quantize, RoundTripIsWithinHalfAStep) {
  const auto [scheme, row] = GetParam();
  std::mt19937 rng(7);
  const std::vector<float> values = random_values(static_cast<std::size_t>(3 * row), rng, 2.0f);
  const TensorData q = TensorData::from_vec(values, Shape{3, row}).quantize(scheme);
  const std::vector<float> back = q.dequantize().to_vec<float>();
  const int n = static_cast<int>(scheme.kind == Kind::Int8Channel ? row : scheme.block_size);
  const double levels = scheme.kind == Kind::Q4_0 || scheme.kind == Kind::Q4_1   ? 15
                        : scheme.kind == Kind::Q5_0 || scheme.kind == Kind::Q5_1 ? 31
                                                                                 : 254;
  for (std::size_t b = 0; b < values.size() / n; ++b) {
    const auto [lo, hi] = std::minmax_element(values.begin() + b * n, values.begin() + (b + 1) * n);
    const double span = std::max(std::fabs(*lo), std::fabs(*hi)) * 2;
    // A step is the span over the levels; the symmetric 4- and 5-bit kinds clamp the far end
    // to one step short, and the f16 scale adds its rounding.
    for (int j = 0; j < n; ++j) {
      const std::size_t i = b * n + j;
      EXPECT_LE(std::fabs(back[i] - values[i]), span / levels * 1.01 + 1e-6)
          << quant_kind_name(scheme.kind) << " value " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Schemes, Quantize,
    ::testing::Values(Case{quant_scheme(Kind::Q4_0), 64}, Case{quant_scheme(Kind::Q4_1), 64},
                      Case{quant_scheme(Kind::Q5_0), 64}, Case{quant_scheme(Kind::Q5_1), 64},
                      Case{quant_scheme(Kind::Q8_0), 96}, Case{int8_block_scheme(16), 48},
                      Case{int8_block_scheme(1), 5}, Case{int8_channel_scheme(), 37}),
    [](const auto& info) {
      return std::string(quant_kind_name(info.param.scheme.kind)) + "_" +
             std::to_string(info.index);
    });

TEST(QuantizeInt8, StoresTheExactF32Scale) {
  const std::vector<float> values = {0.5f, -3.25f, 1e-30f, 2.0f, 0.0f, -0.0f};
  const TensorData q = TensorData::from_vec(values, Shape{2, 3}).quantize(int8_channel_scheme());
  for (int row = 0; row < 2; ++row) {
    float d;
    std::memcpy(&d, q.bytes().data() + row * 7, 4);
    const float amax = row == 0 ? 3.25f : 2.0f;
    EXPECT_EQ(d, static_cast<float>(static_cast<double>(amax) / 127.0));
  }
  const std::vector<float> zeros(8, 0.0f);
  const TensorData z = TensorData::from_vec(zeros, Shape{8}).quantize(int8_block_scheme(4));
  EXPECT_EQ(z.dequantize().to_vec<float>(), zeros);
}

TEST(QuantizeInt8, TinyValuesStayFinite) {
  // A subnormal block: the scale is subnormal and the codes still round to their values.
  const std::vector<float> values = {1e-44f, -1e-44f, 5e-45f, 0.0f};
  const std::vector<float> back = TensorData::from_vec(values, Shape{4})
                                      .quantize(int8_block_scheme(4))
                                      .dequantize()
                                      .to_vec<float>();
  for (std::size_t i = 0; i < values.size(); ++i) {
    EXPECT_TRUE(std::isfinite(back[i]));
    EXPECT_NEAR(back[i], values[i], 1e-44);
  }
}

}  // namespace
}  // namespace kiln
