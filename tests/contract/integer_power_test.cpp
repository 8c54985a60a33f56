// The exponent the backends apply for pow_scalar on an integer tensor, straight from the shared
// helper (the tensor layer refuses fractional and non-finite scalars before a backend sees them,
// so those paths are reached here only).
#include "contract/integer_power.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace kiln::integer_power {
namespace {

TEST(IntegerPower, ExponentsThatFitAreKept) {
  const Exponent e = exponent_of(Scalar(127), DType::I8, "pow_scalar");
  EXPECT_FALSE(e.negative);
  EXPECT_TRUE(e.odd);
  EXPECT_EQ(e.value, 127u);
  EXPECT_EQ(exponent_of(Scalar(255u), DType::U8, "op").value, 255u);
  EXPECT_EQ(exponent_of(Scalar(std::numeric_limits<std::uint64_t>::max()), DType::U64, "op").value,
            std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(exponent_of(Scalar(std::numeric_limits<std::int64_t>::max()), DType::I64, "op").value,
            static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()));
}

// Past the range: 2^(b-2) plus the exponent modulo 2^(b-2), which fits and keeps the parity.
TEST(IntegerPower, ExponentsPastTheRangeAreReducedModuloAQuarterOfTheWordSize) {
  EXPECT_EQ(exponent_of(Scalar(128), DType::I8, "op").value, 64u + 0u);
  EXPECT_EQ(exponent_of(Scalar(257), DType::I8, "op").value, 64u + 1u);
  EXPECT_EQ(exponent_of(Scalar(256), DType::U8, "op").value, 64u + 0u);
  EXPECT_EQ(exponent_of(Scalar(70001), DType::I16, "op").value, 16384u + 70001u % 16384u);
  const std::uint64_t big = (std::uint64_t{1} << 63) + 5;
  EXPECT_EQ(exponent_of(Scalar(big), DType::I64, "op").value, (std::uint64_t{1} << 62) + 5);
}

TEST(IntegerPower, NegativeExponentsKeepOnlyTheirParity) {
  for (DType d : {DType::I8, DType::U8, DType::I64, DType::U64}) {
    const Exponent odd = exponent_of(Scalar(-257), d, "op");
    EXPECT_TRUE(odd.negative);
    EXPECT_TRUE(odd.odd);
    const Exponent even = exponent_of(Scalar(std::numeric_limits<std::int64_t>::min()), d, "op");
    EXPECT_TRUE(even.negative);
    EXPECT_FALSE(even.odd);
  }
}

TEST(IntegerPower, FloatScalarsTruncateTowardZeroAndMustBeFinite) {
  const Exponent minus_one = exponent_of(Scalar(-1.5), DType::I32, "op");
  EXPECT_TRUE(minus_one.negative);
  EXPECT_TRUE(minus_one.odd);
  const Exponent zero = exponent_of(Scalar(-0.5), DType::I32, "op");
  EXPECT_FALSE(zero.negative);
  EXPECT_EQ(zero.value, 0u);
  EXPECT_EQ(exponent_of(Scalar(3.75), DType::I32, "op").value, 3u);
  try {
    (void)exponent_of(Scalar(std::nan("")), DType::I32, "pow_scalar");
    ADD_FAILURE() << "a NaN exponent was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()),
              "[pow_scalar] the exponent of an integer tensor must be finite, got nan");
  }
}

}  // namespace
}  // namespace kiln::integer_power
