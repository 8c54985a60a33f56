// Comparisons (result Bool), NaN/inf tests, logic on Bool and bitwise ops on integers.
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/integer_math.h"

namespace kiln {

using namespace cpu;

namespace {

template <class Cmp>
Primitive compare(Primitive lhs, Primitive rhs, const char* op, Cmp cmp) {
  const DType dtype = lhs->dtype();
  return visit_dtype(dtype, op, [&]<class T>(type_tag<T>) -> Primitive {
    return map_binary<bool, T>(std::move(lhs), std::move(rhs), DType::Bool, cmp, op);
  });
}

// Integers against a fractional scalar compare in double, so 2 >= 2.5 stays false.
template <class Cmp>
Primitive compare_elem(Primitive x, Scalar value, const char* op, Cmp cmp) {
  const DType dtype = x->dtype();
  return visit_dtype(dtype, op, [&]<class T>(type_tag<T>) -> Primitive {
    using C = compute_t<T>;
    if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
      if (value.is_float()) {
        const double v = value.to_double();
        return map_unary<bool, T>(std::move(x), DType::Bool,
                                  [v, cmp](C a) { return cmp(static_cast<double>(a), v); });
      }
    }
    const C v = value.as<C>();
    return map_unary<bool, T>(std::move(x), DType::Bool, [v, cmp](C a) { return cmp(a, v); });
  });
}

template <class F>
Primitive int_binary(Primitive lhs, Primitive rhs, const char* op, F f) {
  const DType dtype = lhs->dtype();
  return visit_int_dtype(dtype, op, [&]<class T>(type_tag<T>) -> Primitive {
    return map_binary<T, T>(std::move(lhs), std::move(rhs), dtype, f, op);
  });
}

template <class F>
Primitive int_scalar(Primitive x, Scalar value, const char* op, F f) {
  const DType dtype = x->dtype();
  return visit_int_dtype(dtype, op, [&]<class T>(type_tag<T>) -> Primitive {
    const T v = value.as<T>();
    return map_unary<T, T>(std::move(x), dtype, [v, f](T a) { return f(a, v); });
  });
}

template <class F>
Primitive bool_binary(Primitive lhs, Primitive rhs, const char* op, F f) {
  return map_binary<bool, bool>(std::move(lhs), std::move(rhs), DType::Bool, f, op);
}

constexpr auto kEqual = [](auto a, auto b) { return a == b; };
constexpr auto kNotEqual = [](auto a, auto b) { return a != b; };
constexpr auto kGreater = [](auto a, auto b) { return a > b; };
constexpr auto kGreaterEqual = [](auto a, auto b) { return a >= b; };
constexpr auto kLower = [](auto a, auto b) { return a < b; };
constexpr auto kLowerEqual = [](auto a, auto b) { return a <= b; };

}  // namespace

Primitive CpuBackend::equal(Primitive l, Primitive r) { return compare(std::move(l), std::move(r), "equal", kEqual); }
Primitive CpuBackend::not_equal(Primitive l, Primitive r) { return compare(std::move(l), std::move(r), "not_equal", kNotEqual); }
Primitive CpuBackend::greater(Primitive l, Primitive r) { return compare(std::move(l), std::move(r), "greater", kGreater); }
Primitive CpuBackend::greater_equal(Primitive l, Primitive r) {
  return compare(std::move(l), std::move(r), "greater_equal", kGreaterEqual);
}
Primitive CpuBackend::lower(Primitive l, Primitive r) { return compare(std::move(l), std::move(r), "lower", kLower); }
Primitive CpuBackend::lower_equal(Primitive l, Primitive r) {
  return compare(std::move(l), std::move(r), "lower_equal", kLowerEqual);
}
Primitive CpuBackend::equal_elem(Primitive x, Scalar v) { return compare_elem(std::move(x), v, "equal_elem", kEqual); }
Primitive CpuBackend::not_equal_elem(Primitive x, Scalar v) {
  return compare_elem(std::move(x), v, "not_equal_elem", kNotEqual);
}
Primitive CpuBackend::greater_elem(Primitive x, Scalar v) { return compare_elem(std::move(x), v, "greater_elem", kGreater); }
Primitive CpuBackend::greater_equal_elem(Primitive x, Scalar v) {
  return compare_elem(std::move(x), v, "greater_equal_elem", kGreaterEqual);
}
Primitive CpuBackend::lower_elem(Primitive x, Scalar v) { return compare_elem(std::move(x), v, "lower_elem", kLower); }
Primitive CpuBackend::lower_equal_elem(Primitive x, Scalar v) {
  return compare_elem(std::move(x), v, "lower_equal_elem", kLowerEqual);
}

Primitive CpuBackend::is_nan(Primitive x) {
  const DType dtype = x->dtype();
  return visit_float_dtype(dtype, "is_nan", [&]<class T>(type_tag<T>) -> Primitive {
    return map_unary<bool, T>(std::move(x), DType::Bool, [](auto v) { return v != v; });
  });
}

Primitive CpuBackend::is_inf(Primitive x) {
  const DType dtype = x->dtype();
  return visit_float_dtype(dtype, "is_inf", [&]<class T>(type_tag<T>) -> Primitive {
    return map_unary<bool, T>(std::move(x), DType::Bool, [](auto v) { return std::isinf(v); });
  });
}

Primitive CpuBackend::logical_not(Primitive x) {
  return map_unary<bool, bool>(std::move(x), DType::Bool, [](bool v) { return !v; });
}
Primitive CpuBackend::logical_and(Primitive l, Primitive r) {
  return bool_binary(std::move(l), std::move(r), "logical_and", [](bool a, bool b) { return a && b; });
}
Primitive CpuBackend::logical_or(Primitive l, Primitive r) {
  return bool_binary(std::move(l), std::move(r), "logical_or", [](bool a, bool b) { return a || b; });
}
Primitive CpuBackend::logical_xor(Primitive l, Primitive r) {
  return bool_binary(std::move(l), std::move(r), "logical_xor", [](bool a, bool b) { return a != b; });
}

Primitive CpuBackend::bitwise_and(Primitive l, Primitive r) {
  return int_binary(std::move(l), std::move(r), "bitwise_and", [](auto a, auto b) { return decltype(a)(a & b); });
}
Primitive CpuBackend::bitwise_or(Primitive l, Primitive r) {
  return int_binary(std::move(l), std::move(r), "bitwise_or", [](auto a, auto b) { return decltype(a)(a | b); });
}
Primitive CpuBackend::bitwise_xor(Primitive l, Primitive r) {
  return int_binary(std::move(l), std::move(r), "bitwise_xor", [](auto a, auto b) { return decltype(a)(a ^ b); });
}
Primitive CpuBackend::bitwise_left_shift(Primitive l, Primitive r) {
  return int_binary(std::move(l), std::move(r), "bitwise_left_shift", [](auto a, auto b) { return shift_left(a, b); });
}
Primitive CpuBackend::bitwise_right_shift(Primitive l, Primitive r) {
  return int_binary(std::move(l), std::move(r), "bitwise_right_shift", [](auto a, auto b) { return shift_right(a, b); });
}
Primitive CpuBackend::bitwise_not(Primitive x) {
  const DType dtype = x->dtype();
  return visit_int_dtype(dtype, "bitwise_not", [&]<class T>(type_tag<T>) -> Primitive {
    return map_unary<T, T>(std::move(x), dtype, [](T a) { return static_cast<T>(~a); });
  });
}
Primitive CpuBackend::bitwise_and_scalar(Primitive x, Scalar v) {
  return int_scalar(std::move(x), v, "bitwise_and_scalar", [](auto a, auto b) { return decltype(a)(a & b); });
}
Primitive CpuBackend::bitwise_or_scalar(Primitive x, Scalar v) {
  return int_scalar(std::move(x), v, "bitwise_or_scalar", [](auto a, auto b) { return decltype(a)(a | b); });
}
Primitive CpuBackend::bitwise_xor_scalar(Primitive x, Scalar v) {
  return int_scalar(std::move(x), v, "bitwise_xor_scalar", [](auto a, auto b) { return decltype(a)(a ^ b); });
}
Primitive CpuBackend::bitwise_left_shift_scalar(Primitive x, Scalar v) {
  return int_scalar(std::move(x), v, "bitwise_left_shift_scalar", [](auto a, auto b) { return shift_left(a, b); });
}
Primitive CpuBackend::bitwise_right_shift_scalar(Primitive x, Scalar v) {
  return int_scalar(std::move(x), v, "bitwise_right_shift_scalar", [](auto a, auto b) { return shift_right(a, b); });
}

}  // namespace kiln
