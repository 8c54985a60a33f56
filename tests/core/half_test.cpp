// f16 and bf16 conversions against references computed independently in double (frexp/ldexp on
// the real value, then round-to-nearest-even of the scaled significand): every 16-bit pattern
// both ways, every tie between neighbouring values and the floats just around it, plus random
// floats.
#include <gtest/gtest.h>
#include <kiln/half.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

namespace kiln {
namespace {

// A binary16-like format: exponent bits and mantissa bits (f16: 5, 10; bf16: 8, 7).
struct Format {
  int exponent_bits;
  int mantissa_bits;
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  int max_exponent_field() const { return (1 << exponent_bits) - 1; }
  std::uint16_t inf_bits() const {
    return static_cast<std::uint16_t>(max_exponent_field() << mantissa_bits);
  }
  std::uint16_t mantissa_mask() const {
    return static_cast<std::uint16_t>((1 << mantissa_bits) - 1);
  }
  bool is_nan(std::uint16_t bits) const {
    return ((bits >> mantissa_bits) & max_exponent_field()) == max_exponent_field() &&
           (bits & mantissa_mask()) != 0;
  }
  // The value of bits, from the definition of the format.
  double decode(std::uint16_t bits) const {
    const double sign = (bits & 0x8000u) ? -1.0 : 1.0;
    const int exponent = (bits >> mantissa_bits) & max_exponent_field();
    const int mantissa = bits & mantissa_mask();
    if (exponent == max_exponent_field()) {
      return mantissa ? std::numeric_limits<double>::quiet_NaN()
                      : sign * std::numeric_limits<double>::infinity();
    }
    if (exponent == 0) return sign * std::ldexp(mantissa, 1 - bias() - mantissa_bits);
    return sign * std::ldexp((1 << mantissa_bits) + mantissa, exponent - bias() - mantissa_bits);
  }
  // The bits nearest to value (ties to even), from the real value (not NaN).
  std::uint16_t encode(double value) const {
    const std::uint16_t sign = std::signbit(value) ? 0x8000u : 0;
    const double magnitude = std::fabs(value);
    const int min_normal_exponent = 1 - bias();
    int exponent = 0;
    std::frexp(magnitude, &exponent);  // magnitude in [2^(exponent-1), 2^exponent)
    // The spacing of representable values around magnitude.
    const int quantum_exponent = magnitude < std::ldexp(1.0, min_normal_exponent)
                                     ? min_normal_exponent - mantissa_bits
                                     : exponent - 1 - mantissa_bits;
    const double scaled = std::ldexp(magnitude, -quantum_exponent);  // exact
    const double rounded = std::nearbyint(scaled);                   // ties to even
    const double result = std::ldexp(rounded, quantum_exponent);
    const double max_finite = decode(static_cast<std::uint16_t>(inf_bits() - 1));
    if (result > max_finite) return static_cast<std::uint16_t>(sign | inf_bits());
    const auto significand = static_cast<std::uint32_t>(rounded);
    if (quantum_exponent == min_normal_exponent - mantissa_bits &&
        significand <= (1u << mantissa_bits)) {
      return static_cast<std::uint16_t>(sign | significand);  // subnormal, or the least normal
    }
    // Exponent field of the binade, plus the significand (a carry into the next binade adds one
    // to the exponent field, as the IEEE bit layout intends).
    const std::uint32_t field =
        static_cast<std::uint32_t>(quantum_exponent + mantissa_bits + bias());
    return static_cast<std::uint16_t>(
        sign | ((field << mantissa_bits) + significand - (1u << mantissa_bits)));
  }
};

constexpr Format kF16{5, 10};
constexpr Format kBF16{8, 7};

float float_from_bits(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

struct Case {
  const char* name;
  Format format;
  float (*to_float)(std::uint16_t);
  std::uint16_t (*from_float)(float);
};

class HalfConversion : public ::testing::TestWithParam<Case> {};

TEST_P(HalfConversion, DecodeMatchesDefinitionForEveryPattern) {
  const Case& c = GetParam();
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float got = c.to_float(bits);
    const double want = c.format.decode(bits);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << b;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << std::hex << b;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << std::hex << b;  // -0 stays -0
    }
  }
}

TEST_P(HalfConversion, RoundTripIsExactAndNanStaysNan) {
  const Case& c = GetParam();
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const std::uint16_t back = c.from_float(c.to_float(bits));
    if (c.format.is_nan(bits)) {
      ASSERT_TRUE(c.format.is_nan(back)) << std::hex << b << " -> " << back;
      ASSERT_EQ(back & 0x8000u, bits & 0x8000u) << "NaN sign kept";
    } else {
      ASSERT_EQ(back, bits) << std::hex << b;
    }
  }
}

// For every pair of neighbouring finite values of the same sign: the tie between them, and the
// floats just below and above it, must round as the reference says (ties to even).
TEST_P(HalfConversion, TiesAndNeighboursRoundToNearestEven) {
  const Case& c = GetParam();
  int ties_checked = 0;
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const auto low = static_cast<std::uint16_t>(b);
    const auto high = static_cast<std::uint16_t>(b + 1);
    if ((low & 0x8000u) != (high & 0x8000u)) continue;
    if ((high & 0x7fffu) >= c.format.inf_bits()) continue;  // both must be finite
    const double tie = (c.format.decode(low) + c.format.decode(high)) / 2;
    const float at = static_cast<float>(tie);
    ASSERT_EQ(static_cast<double>(at), tie) << "tie must be a float";
    for (float v : {std::nextafter(at, 0.0f), at, std::nextafter(at, 2 * at)}) {
      ASSERT_EQ(c.from_float(v), c.format.encode(v)) << std::hexfloat << v;
    }
    // At the tie itself the result is whichever neighbour is even.
    ASSERT_EQ(c.from_float(at), (low & 1u) ? high : low) << std::hexfloat << at;
    ++ties_checked;
  }
  EXPECT_GT(ties_checked, 60000);
}

TEST_P(HalfConversion, RandomFloatsMatchReference) {
  const Case& c = GetParam();
  std::mt19937 rng(1234);
  for (int i = 0; i < 2'000'000; ++i) {
    const float v = float_from_bits(rng());
    if (std::isnan(v)) {
      ASSERT_TRUE(c.format.is_nan(c.from_float(v)));
      continue;
    }
    ASSERT_EQ(c.from_float(v), c.format.encode(v)) << std::hexfloat << v;
  }
}

TEST_P(HalfConversion, InfinitiesAndNans) {
  const Case& c = GetParam();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(c.from_float(inf), c.format.inf_bits());
  EXPECT_EQ(c.from_float(-inf), c.format.inf_bits() | 0x8000u);
  EXPECT_TRUE(std::isinf(c.to_float(c.format.inf_bits())));
  // Signalling NaN and NaN whose payload sits only in bits the format drops stay NaN.
  for (std::uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fa00000u}) {
    const std::uint16_t out = c.from_float(float_from_bits(nan_bits));
    EXPECT_TRUE(c.format.is_nan(out)) << std::hex << nan_bits;
  }
  EXPECT_EQ(c.from_float(std::numeric_limits<float>::max()), c.format.inf_bits());
}

// Overflow: above the largest finite value, rounding goes to infinity from the tie with the
// next power of two up (ties to even: the largest finite significand is odd).
TEST_P(HalfConversion, OverflowRoundsToInfinityFromTheTie) {
  const Case& c = GetParam();
  const auto max_bits = static_cast<std::uint16_t>(c.format.inf_bits() - 1);
  const double max_finite = c.format.decode(max_bits);
  const double next_power = std::ldexp(1.0, std::ilogb(max_finite) + 1);
  const float tie = static_cast<float>((max_finite + next_power) / 2);
  EXPECT_EQ(c.from_float(static_cast<float>(max_finite)), max_bits);
  EXPECT_EQ(c.from_float(std::nextafter(tie, 0.0f)), max_bits);
  EXPECT_EQ(c.from_float(tie), c.format.inf_bits());
  EXPECT_EQ(c.from_float(-tie), c.format.inf_bits() | 0x8000u);
}

INSTANTIATE_TEST_SUITE_P(Formats, HalfConversion,
                         ::testing::Values(Case{"f16", kF16, f16_bits_to_float, float_to_f16_bits},
                                           Case{"bf16", kBF16, bf16_bits_to_float,
                                                float_to_bf16_bits}),
                         [](const auto& info) { return std::string(info.param.name); });

// Hand-picked f16 values, so a reader sees the rules without the reference.
TEST(HalfF16, KnownValues) {
  EXPECT_EQ(float_to_f16_bits(1.0f), 0x3c00u);
  EXPECT_EQ(float_to_f16_bits(-2.0f), 0xc000u);
  EXPECT_EQ(float_to_f16_bits(65504.0f), 0x7bffu);               // max finite
  EXPECT_EQ(float_to_f16_bits(65519.0f), 0x7bffu);               // below the tie with 65536
  EXPECT_EQ(float_to_f16_bits(65520.0f), 0x7c00u);               // tie: rounds to even = inf
  EXPECT_EQ(float_to_f16_bits(1e10f), 0x7c00u);                  // overflow
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001u);  // least subnormal
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000u);  // tie with 0: even (0)
  EXPECT_EQ(float_to_f16_bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001u);
  EXPECT_EQ(float_to_f16_bits(std::ldexp(3.0f, -25)), 0x0002u);             // tie 1|2: even (2)
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -14)), 0x0400u);             // least normal
  EXPECT_EQ(float_to_f16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00u);      // tie: even
  EXPECT_EQ(float_to_f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02u);  // tie: even
  EXPECT_EQ(float_to_f16_bits(-0.0f), 0x8000u);
  EXPECT_EQ(f16_bits_to_float(0x0001u), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_bits_to_float(0x03ffu), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(static_cast<float>(half(0.1f)), 0.0999755859375f);
}

TEST(HalfBF16, KnownValues) {
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80u);
  EXPECT_EQ(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80u);        // tie: even
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82u);    // tie: even
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80u);  // overflow
  EXPECT_EQ(float_to_bf16_bits(float_from_bits(0x00010000u)), 0x0001u);       // subnormal
  EXPECT_EQ(static_cast<float>(bfloat16(3.0f)), 3.0f);
}

}  // namespace
}  // namespace kiln
