// Integer arithmetic without undefined behaviour: wrap-around on overflow, floor division and
// Python-style remainder, shifts past the bit width saturate. Division by zero (0 raised to a
// negative power included) is reported through a flag so the caller can throw after the loop.
#pragma once

#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>

namespace kiln::cpu {

template <class T>
using unsigned_of = std::make_unsigned_t<T>;

template <class T>
T wrap_add(T a, T b) noexcept {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return static_cast<T>(static_cast<unsigned_of<T>>(a) + static_cast<unsigned_of<T>>(b));
  } else {
    return a + b;
  }
}
template <class T>
T wrap_sub(T a, T b) noexcept {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return static_cast<T>(static_cast<unsigned_of<T>>(a) - static_cast<unsigned_of<T>>(b));
  } else {
    return a - b;
  }
}
template <class T>
T wrap_mul(T a, T b) noexcept {
  if constexpr (std::is_same_v<T, bool>) {
    return a && b;
  } else if constexpr (std::is_integral_v<T>) {
    // Promote narrow unsigned types to unsigned int so the multiply cannot overflow an int.
    using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, unsigned_of<T>>;
    return static_cast<T>(static_cast<U>(static_cast<unsigned_of<T>>(a)) *
                          static_cast<U>(static_cast<unsigned_of<T>>(b)));
  } else {
    return a * b;
  }
}

// Floor division; b == 0 sets the flag and gives 0.
template <class T>
T int_floor_div(T a, T b, std::atomic<bool>& divided_by_zero) noexcept {
  if (b == 0) {
    divided_by_zero.store(true, std::memory_order_relaxed);
    return 0;
  }
  if constexpr (std::is_signed_v<T>) {
    if (a == std::numeric_limits<T>::min() && b == -1) return a;  // wraps, as in two's complement
    T q = static_cast<T>(a / b);
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
  } else {
    return static_cast<T>(a / b);
  }
}

// Remainder with the sign of the divisor (Python, PyTorch): a - floor(a / b) * b.
template <class T>
T int_remainder(T a, T b, std::atomic<bool>& divided_by_zero) noexcept {
  if (b == 0) {
    divided_by_zero.store(true, std::memory_order_relaxed);
    return 0;
  }
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return 0;
    T r = static_cast<T>(a % b);
    if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
    return r;
  } else {
    return static_cast<T>(a % b);
  }
}

template <class T>
T float_remainder(T a, T b) noexcept {
  T r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// base^exponent for a negative exponent: 1 / base^|exponent| truncated toward zero, so 1 for
// base 1, +-1 for base -1 (by parity), 0 for other bases; base 0 divides by zero (the flag is
// set and 0 given, as int_floor_div does).
template <class T>
T int_pow_negative(T base, bool odd, std::atomic<bool>& divided_by_zero) noexcept {
  if (base == 0) {
    divided_by_zero.store(true, std::memory_order_relaxed);
    return 0;
  }
  if (base == 1) return 1;
  if constexpr (std::is_signed_v<T>) {
    if (base == -1) return odd ? T(-1) : T(1);
  }
  return 0;
}

// Integer power by squaring, wrapping on overflow; negative exponents as int_pow_negative.
template <class T>
T int_pow(T base, T exponent, std::atomic<bool>& divided_by_zero) noexcept {
  if constexpr (std::is_signed_v<T>) {
    if (exponent < 0) return int_pow_negative(base, exponent % 2 != 0, divided_by_zero);
  }
  T result = 1;
  while (exponent != 0) {
    if (exponent & 1) result = wrap_mul(result, base);
    base = wrap_mul(base, base);
    exponent = static_cast<T>(exponent >> 1);
  }
  return result;
}

template <class T>
T shift_left(T a, T b) noexcept {
  constexpr T bits = static_cast<T>(sizeof(T) * 8);
  if (b < 0 || b >= bits) return 0;
  return static_cast<T>(static_cast<unsigned_of<T>>(a) << b);
}

template <class T>
T shift_right(T a, T b) noexcept {
  constexpr T bits = static_cast<T>(sizeof(T) * 8);
  if (b < 0 || b >= bits) {
    if constexpr (std::is_signed_v<T>) return a < 0 ? T(-1) : T(0);
    return 0;
  }
  return static_cast<T>(a >> b);  // arithmetic shift for signed types
}

}  // namespace kiln::cpu
