// Helpers shared by the CPU indexing kernels (cpu_index.cpp, cpu_mask.cpp, cpu_cat.cpp): index
// loading with range checks, the update modes of scatter-like ops, and dispatch on element size
// for kernels that only move bytes.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/integer_math.h"
#include "core/dtype_dispatch.h"
#include "kiln/options.h"

namespace kiln::cpu {

// Pure copies do not care what the bytes mean: one instantiation per element size.
template <class F>
decltype(auto) visit_element_size(DType dtype, F&& f) {
  switch (dtype_size(dtype)) {
    case 1:
      return f(type_tag<std::uint8_t>{});
    case 2:
      return f(type_tag<std::uint16_t>{});
    case 4:
      return f(type_tag<std::uint32_t>{});
    default:
      return f(type_tag<std::uint64_t>{});
  }
}

[[noreturn]] void fail_index(const char* op, std::int64_t dim, std::int64_t size,
                             std::int64_t index);
[[noreturn]] void fail_index_unsigned(const char* op, std::int64_t dim, std::int64_t size,
                                      std::uint64_t index);

// raw as a position along a dim of the given size; InvalidArgument (naming op, the index and the
// dim size) when it is negative or too large.
template <class I>
inline std::int64_t checked_index(I raw, std::int64_t size, const char* op, std::int64_t dim) {
  if constexpr (std::is_signed_v<I>) {
    const std::int64_t v = static_cast<std::int64_t>(raw);
    if (v < 0 || v >= size) fail_index(op, dim, size, v);
    return v;
  } else {
    const std::uint64_t v = static_cast<std::uint64_t>(raw);
    if (v >= static_cast<std::uint64_t>(size)) fail_index_unsigned(op, dim, size, v);
    return static_cast<std::int64_t>(v);
  }
}

// How scatter-like ops combine the value already in the output (a) with the new one (b).
// Integers wrap on overflow; float min/max propagate NaN; on Bool, Add and Max are `or`,
// Mul and Min are `and`.
template <IndexingUpdate M, class T>
inline T combine(T a, T b) noexcept {
  using U = IndexingUpdate;
  if constexpr (M == U::Assign) {
    return b;
  } else if constexpr (std::is_same_v<T, bool>) {
    return M == U::Add || M == U::Max ? (a || b) : (a && b);
  } else if constexpr (std::is_integral_v<T>) {
    if constexpr (M == U::Add) return wrap_add(a, b);
    if constexpr (M == U::Mul) return wrap_mul(a, b);
    if constexpr (M == U::Min) return b < a ? b : a;
    if constexpr (M == U::Max) return b > a ? b : a;
  } else {
    using C = compute_t<T>;
    const C x = static_cast<C>(a);
    const C y = static_cast<C>(b);
    if constexpr (M == U::Add) return static_cast<T>(x + y);
    if constexpr (M == U::Mul) return static_cast<T>(x * y);
    // NaN already there stays; a NaN value replaces what is there.
    if constexpr (M == U::Min) return !std::isnan(x) && (std::isnan(y) || y < x) ? b : a;
    if constexpr (M == U::Max) return !std::isnan(x) && (std::isnan(y) || y > x) ? b : a;
  }
}

// Calls f with std::integral_constant<IndexingUpdate, mode>.
template <class F>
decltype(auto) visit_update(IndexingUpdate mode, F&& f) {
  using U = IndexingUpdate;
  switch (mode) {
    case U::Add:
      return f(std::integral_constant<U, U::Add>{});
    case U::Mul:
      return f(std::integral_constant<U, U::Mul>{});
    case U::Min:
      return f(std::integral_constant<U, U::Min>{});
    case U::Max:
      return f(std::integral_constant<U, U::Max>{});
    case U::Assign:
      break;
  }
  return f(std::integral_constant<U, U::Assign>{});
}

}  // namespace kiln::cpu
