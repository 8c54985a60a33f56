// 16-bit floating-point storage types. Arithmetic happens in float; conversions round to
// nearest even and keep NaN, infinities and subnormals.
#pragma once

#include <cstdint>

namespace kiln {

float f16_bits_to_float(std::uint16_t bits) noexcept;
std::uint16_t float_to_f16_bits(float value) noexcept;
float bf16_bits_to_float(std::uint16_t bits) noexcept;
std::uint16_t float_to_bf16_bits(float value) noexcept;

// IEEE 754 binary16.
struct half {
  std::uint16_t bits = 0;
  half() = default;
  half(float value) noexcept : bits(float_to_f16_bits(value)) {}  // NOLINT: implicit on purpose
  explicit half(double value) noexcept : half(static_cast<float>(value)) {}
  operator float() const noexcept { return f16_bits_to_float(bits); }  // NOLINT
  static half from_bits(std::uint16_t b) noexcept {
    half h;
    h.bits = b;
    return h;
  }
};

// bfloat16: the upper half of a binary32.
struct bfloat16 {
  std::uint16_t bits = 0;
  bfloat16() = default;
  bfloat16(float value) noexcept : bits(float_to_bf16_bits(value)) {}  // NOLINT
  explicit bfloat16(double value) noexcept : bfloat16(static_cast<float>(value)) {}
  operator float() const noexcept { return bf16_bits_to_float(bits); }  // NOLINT
  static bfloat16 from_bits(std::uint16_t b) noexcept {
    bfloat16 h;
    h.bits = b;
    return h;
  }
};

inline float f16_bits_to_float(std::uint16_t bits) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;
  std::uint32_t out;
  if (exponent == 0x1f) {
    out = sign | 0x7f800000u | (mantissa << 13);  // inf or NaN (payload kept)
  } else if (exponent != 0) {
    out = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    out = sign;
  } else {  // subnormal: normalise
    std::uint32_t e = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    out = sign | (e << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return __builtin_bit_cast(float, out);
}

inline std::uint16_t float_to_f16_bits(float value) noexcept {
  const std::uint32_t x = __builtin_bit_cast(std::uint32_t, value);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN; keep NaN quiet and non-zero
    return abs > 0x7f800000u ? static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu))
                             : static_cast<std::uint16_t>(sign | 0x7c00u);
  }
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {               // result is subnormal or zero
    if (abs < 0x33000000u) return sign;  // below half the smallest subnormal
    const std::uint32_t exponent = abs >> 23;
    const std::uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126 - exponent;  // 14..24
    std::uint32_t half_mantissa = mantissa >> shift;
    const std::uint32_t remainder = mantissa & ((1u << shift) - 1);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (half_mantissa & 1u))) ++half_mantissa;
    return static_cast<std::uint16_t>(sign | half_mantissa);
  }
  std::uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // round to nearest even
  rounded -= 0x38000000u;                                     // rebias 127 -> 15
  return static_cast<std::uint16_t>(sign | (rounded >> 13));
}

inline float bf16_bits_to_float(std::uint16_t bits) noexcept {
  return __builtin_bit_cast(float, static_cast<std::uint32_t>(bits) << 16);
}

inline std::uint16_t float_to_bf16_bits(float value) noexcept {
  const std::uint32_t x = __builtin_bit_cast(std::uint32_t, value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace kiln
