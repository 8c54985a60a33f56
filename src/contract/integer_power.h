// The exponent of pow_scalar on an integer tensor, shared by the backends so they agree. It is
// read from the Scalar itself rather than from the Scalar narrowed to the tensor's dtype: an i8
// tensor raised to -256 or 256 is not raised to 0, nor a u8 tensor raised to -1 raised to 255.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "kiln/detail/format.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/scalar.h"

namespace kiln::integer_power {

struct Exponent {
  // A negative exponent: the power is 1 for base 1, +-1 for base -1 (by the exponent's parity),
  // 1 / base truncated toward zero (0) for other bases, and a division by zero for base 0.
  bool negative = false;
  bool odd = false;
  // A non-negative exponent, or one that gives the same powers and fits the dtype.
  std::uint64_t value = 0;
};

// A float scalar is truncated toward zero, as a cast to an integer is; one that is not finite is
// refused (InvalidArgument). An exponent e past the dtype's range (b bits, b >= 8) is replaced by
// e' = 2^(b-2) + e mod 2^(b-2), which gives the same power in b-bit wrapping arithmetic: an odd
// base has x^(2^(b-2)) = 1 modulo 2^b, and an even base has x^e = 0 for every e >= b, which both
// e and e' are. e' < 2^(b-1) fits signed and unsigned dtypes.
inline Exponent exponent_of(const Scalar& scalar, DType dtype, std::string_view op) {
  const int bits = static_cast<int>(8 * dtype_size(dtype));
  const int value_bits = is_signed_int(dtype) ? bits - 1 : bits;
  const std::uint64_t period = std::uint64_t{1} << (bits - 2);
  Exponent e;
  if (scalar.is_float()) {
    const double d = std::trunc(scalar.to_double());
    if (!std::isfinite(d)) {
      detail::fail<InvalidArgument>(op, "the exponent of an integer tensor must be finite, got ",
                                    scalar.to_double());
    }
    e.negative = d < 0;
    e.odd = std::fmod(d, 2.0) != 0;
    if (!e.negative) {
      // Both conversions are exact: d is an integer below 2^value_bits, and fmod is exact.
      e.value =
          d < std::ldexp(1.0, value_bits)
              ? static_cast<std::uint64_t>(d)
              : period + static_cast<std::uint64_t>(std::fmod(d, static_cast<double>(period)));
    }
    return e;
  }
  std::uint64_t magnitude = 0;
  if (scalar.kind() == Scalar::Kind::UInt) {
    magnitude = scalar.to_uint();
  } else {
    const std::int64_t i = scalar.to_int();
    e.negative = i < 0;
    magnitude = static_cast<std::uint64_t>(i);  // two's complement keeps the parity
  }
  e.odd = (magnitude & 1) != 0;
  if (!e.negative) {
    const bool fits = value_bits == 64 || magnitude < (std::uint64_t{1} << value_bits);
    e.value = fits ? magnitude : period + magnitude % period;
  }
  return e;
}

}  // namespace kiln::integer_power
