// A dtype-agnostic scalar argument: ops convert it to the tensor's element type.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

namespace kiln {

class Scalar {
 public:
  enum class Kind : std::uint8_t { Float, Int, UInt, Bool };

  constexpr Scalar() = default;
  template <class T>
  requires std::is_arithmetic_v<T>
  constexpr Scalar(T value) noexcept {  // NOLINT: implicit so ops accept plain numbers
    if constexpr (std::is_same_v<T, bool>) {
      kind_ = Kind::Bool;
      int_ = value ? 1 : 0;
      float_ = value ? 1.0 : 0.0;
    } else if constexpr (std::is_floating_point_v<T>) {
      kind_ = Kind::Float;
      float_ = static_cast<double>(value);
      int_ = truncate<std::int64_t>(float_);
    } else if constexpr (std::is_signed_v<T>) {
      kind_ = Kind::Int;
      int_ = static_cast<std::int64_t>(value);
      float_ = static_cast<double>(value);
    } else {
      kind_ = Kind::UInt;
      int_ = static_cast<std::int64_t>(value);
      uint_ = static_cast<std::uint64_t>(value);
      float_ = static_cast<double>(value);
    }
  }

  constexpr Kind kind() const noexcept { return kind_; }
  constexpr double to_double() const noexcept { return float_; }
  constexpr std::int64_t to_int() const noexcept { return int_; }
  constexpr std::uint64_t to_uint() const noexcept {
    return kind_ == Kind::UInt ? uint_ : static_cast<std::uint64_t>(int_);
  }
  constexpr bool to_bool() const noexcept { return float_ != 0.0; }
  constexpr bool is_float() const noexcept { return kind_ == Kind::Float; }

  // The value as element type T (floats keep full precision, integers convert exactly).
  template <class T>
  constexpr T as() const noexcept {
    if constexpr (std::is_same_v<T, bool>) {
      return to_bool();
    } else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
      return kind_ == Kind::Float ? static_cast<T>(int_) : static_cast<T>(to_uint());
    } else if constexpr (std::is_integral_v<T>) {
      return kind_ == Kind::Float ? truncate<T>(float_) : static_cast<T>(int_);
    } else {
      return static_cast<T>(float_);
    }
  }

 private:
  // v toward zero as the signed integer I, saturating at I's range, NaN -> 0 (a plain cast of
  // an out-of-range double is undefined).
  template <class I>
  static constexpr I truncate(double v) noexcept {
    // 2^(bits - 1): I's maximum plus one, the first double past it.
    constexpr double high = -static_cast<double>(std::numeric_limits<I>::min());
    if (v != v) return 0;
    if (v >= high) return std::numeric_limits<I>::max();
    if (v <= static_cast<double>(std::numeric_limits<I>::min()))
      return std::numeric_limits<I>::min();
    return static_cast<I>(v);
  }

  Kind kind_ = Kind::Float;
  double float_ = 0.0;
  std::int64_t int_ = 0;
  std::uint64_t uint_ = 0;
};

}  // namespace kiln
