// Calls a generic function with the C++ element type of a run-time dtype:
//   visit_dtype(dtype, "op", [&]<class T>(type_tag<T>) { ... });
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>

#include "kiln/detail/format.h"
#include "kiln/dtype.h"
#include "kiln/error.h"

namespace kiln {

template <class T>
struct type_tag {
  using type = T;
};

template <class F>
decltype(auto) visit_dtype(DType dtype, std::string_view op, F&& f) {
  switch (dtype) {
    case DType::F64:
      return f(type_tag<double>{});
    case DType::F32:
      return f(type_tag<float>{});
    case DType::F16:
      return f(type_tag<half>{});
    case DType::BF16:
      return f(type_tag<bfloat16>{});
    case DType::I64:
      return f(type_tag<std::int64_t>{});
    case DType::I32:
      return f(type_tag<std::int32_t>{});
    case DType::I16:
      return f(type_tag<std::int16_t>{});
    case DType::I8:
      return f(type_tag<std::int8_t>{});
    case DType::U64:
      return f(type_tag<std::uint64_t>{});
    case DType::U32:
      return f(type_tag<std::uint32_t>{});
    case DType::U16:
      return f(type_tag<std::uint16_t>{});
    case DType::U8:
      return f(type_tag<std::uint8_t>{});
    case DType::Bool:
      return f(type_tag<bool>{});
    case DType::QFloat:
      break;
  }
  detail::fail<UnsupportedDType>(op, "dtype ", dtype_name(dtype), " is not supported here");
}

// Every dtype except Bool.
template <class F>
decltype(auto) visit_numeric_dtype(DType dtype, std::string_view op, F&& f) {
  if (dtype == DType::Bool) {
    detail::fail<UnsupportedDType>(op, "expected a float or integer dtype, got bool");
  }
  return visit_dtype(dtype, op, std::forward<F>(f));
}

// Float dtypes only (f64, f32, f16, bf16).
template <class F>
decltype(auto) visit_float_dtype(DType dtype, std::string_view op, F&& f) {
  switch (dtype) {
    case DType::F64:
      return f(type_tag<double>{});
    case DType::F32:
      return f(type_tag<float>{});
    case DType::F16:
      return f(type_tag<half>{});
    case DType::BF16:
      return f(type_tag<bfloat16>{});
    default:
      break;
  }
  detail::fail<UnsupportedDType>(op, "expected a float dtype, got ", dtype_name(dtype));
}

// Integer dtypes only.
template <class F>
decltype(auto) visit_int_dtype(DType dtype, std::string_view op, F&& f) {
  switch (dtype) {
    case DType::I64:
      return f(type_tag<std::int64_t>{});
    case DType::I32:
      return f(type_tag<std::int32_t>{});
    case DType::I16:
      return f(type_tag<std::int16_t>{});
    case DType::I8:
      return f(type_tag<std::int8_t>{});
    case DType::U64:
      return f(type_tag<std::uint64_t>{});
    case DType::U32:
      return f(type_tag<std::uint32_t>{});
    case DType::U16:
      return f(type_tag<std::uint16_t>{});
    case DType::U8:
      return f(type_tag<std::uint8_t>{});
    default:
      break;
  }
  detail::fail<UnsupportedDType>(op, "expected an integer dtype, got ", dtype_name(dtype));
}

// The type arithmetic is done in: float for the 16-bit floats, the type itself otherwise.
template <class T>
struct compute_type {
  using type = T;
};
template <>
struct compute_type<half> {
  using type = float;
};
template <>
struct compute_type<bfloat16> {
  using type = float;
};
template <class T>
using compute_t = typename compute_type<T>::type;

// Converts between element types the way casts do: float -> int truncates toward zero
// (NaN -> 0, out of range saturates), anything -> bool is "!= 0".
template <class To, class From>
inline To convert_element(From value) noexcept {
  if constexpr (std::is_same_v<To, From>) {
    return value;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<compute_t<From>>(value) != compute_t<From>(0);
  } else if constexpr (std::is_integral_v<To> && (std::is_floating_point_v<compute_t<From>>)) {
    const double v = static_cast<double>(static_cast<compute_t<From>>(value));
    if (!(v == v)) return To(0);
    constexpr double lo = static_cast<double>(std::numeric_limits<To>::lowest());
    constexpr double hi = static_cast<double>(std::numeric_limits<To>::max());
    if (v <= lo) return std::numeric_limits<To>::lowest();
    if (v >= hi) return std::numeric_limits<To>::max();
    return static_cast<To>(v);
  } else if constexpr (std::is_same_v<To, half> || std::is_same_v<To, bfloat16>) {
    // Wider types go through float, as PyTorch does.
    return To(static_cast<float>(static_cast<compute_t<From>>(value)));
  } else {
    return static_cast<To>(static_cast<compute_t<From>>(value));
  }
}

}  // namespace kiln
