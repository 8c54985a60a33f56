// Comparisons (result Bool), NaN/inf tests, logic on Bool and bitwise ops on integers. A tensor
// against a scalar runs the tensor-tensor kernel with the scalar as a broadcast operand.
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/integer_math.h"

namespace kiln {

using namespace cpu;

namespace {

constexpr auto kEqual = [](auto a, auto b) { return a == b; };
constexpr auto kNotEqual = [](auto a, auto b) { return a != b; };
constexpr auto kGreater = [](auto a, auto b) { return a > b; };
constexpr auto kGreaterEqual = [](auto a, auto b) { return a >= b; };
constexpr auto kLower = [](auto a, auto b) { return a < b; };
constexpr auto kLowerEqual = [](auto a, auto b) { return a <= b; };
constexpr auto kBitAnd = [](auto a, auto b) { return decltype(a)(a & b); };
constexpr auto kBitOr = [](auto a, auto b) { return decltype(a)(a | b); };
constexpr auto kBitXor = [](auto a, auto b) { return decltype(a)(a ^ b); };
constexpr auto kShiftLeft = [](auto a, auto b) { return shift_left(a, b); };
constexpr auto kShiftRight = [](auto a, auto b) { return shift_right(a, b); };

// Equality is blind to signedness: integers compare as bits, one kernel per width.
// (The constexpr lambdas are const objects: a functor taken by value has their type without it.)
template <class F, const auto& kFunctor>
constexpr bool kIs =
    std::is_same_v<F, std::remove_const_t<std::remove_reference_t<decltype(kFunctor)>>>;

template <class Cmp>
constexpr bool kSignBlindCompare = kIs<Cmp, kEqual> || kIs<Cmp, kNotEqual>;
template <class Cmp, class T>
using compare_kernel_t = std::conditional_t<kSignBlindCompare<Cmp>, bits_t<T>, T>;

// The comparison kernels, for the eager ops and for the steps of a fused group (elementwise.h).
template <class Cmp>
void make_compare(DType dtype, const char* op, Cmp cmp, OwnedKernel& k) {
  visit_kernel(dtype, op,
               [&]<class T>(type_tag<T>) { k.binary<bool, compare_kernel_t<Cmp, T>>(cmp); });
}

// Integers against a fractional scalar compare in double, so 2 >= 2.5 stays false: a unary
// kernel with the scalar inside. Otherwise the tensor-tensor kernel with the scalar bound.
template <class Cmp>
void make_compare_elem(DType dtype, const Scalar& value, const char* op, Cmp cmp, OwnedKernel& k) {
  visit_kernel(dtype, op, [&]<class T>(type_tag<T>) {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (value.is_float()) {
        k.unary<bool, T>(
            [v = value.to_double(), cmp](T a) { return cmp(static_cast<double>(a), v); });
        return;
      }
    }
    using K = compare_kernel_t<Cmp, T>;
    k.binary<bool, K>(cmp);
    k.bind_scalar(static_cast<K>(value.as<T>()));
  });
}

template <class Cmp>
Primitive compare(Primitive lhs, Primitive rhs, const char* op, Cmp cmp) {
  OwnedKernel k;
  make_compare(lhs->dtype(), op, cmp, k);
  return run_binary(std::move(lhs), std::move(rhs), DType::Bool, k.kernel(), op);
}

template <class Cmp>
Primitive compare_elem(Primitive x, Scalar value, const char* op, Cmp cmp) {
  OwnedKernel k;
  make_compare_elem(x->dtype(), value, op, cmp, k);
  if (k.scalar() == nullptr) return run_unary(std::move(x), DType::Bool, k.kernel(), op);
  return run_binary_scalar(std::move(x), k.scalar(), DType::Bool, k.kernel(), op);
}

// Bitwise logic is blind to signedness (one kernel per width); shifts are not.
template <class F, class T>
using bitwise_kernel_t =
    std::conditional_t<kIs<F, kShiftLeft> || kIs<F, kShiftRight>, T, bits_t<T>>;

template <class F>
Primitive int_binary(Primitive lhs, Primitive rhs, const char* op, F f) {
  const DType dtype = lhs->dtype();
  return visit_int_dtype(dtype, op, [&]<class T>(type_tag<T>) -> Primitive {
    using K = bitwise_kernel_t<F, T>;
    return run_binary(std::move(lhs), std::move(rhs), dtype, make_binary_kernel<K, K>(f), op);
  });
}

template <class F>
Primitive int_scalar(Primitive x, Scalar value, const char* op, F f) {
  const DType dtype = x->dtype();
  return visit_int_dtype(dtype, op, [&]<class T>(type_tag<T>) -> Primitive {
    using K = bitwise_kernel_t<F, T>;
    const K v = static_cast<K>(value.as<T>());
    return run_binary_scalar(std::move(x), &v, dtype, make_binary_kernel<K, K>(f), op);
  });
}

template <class F>
Primitive bool_binary(Primitive lhs, Primitive rhs, const char* op, F f) {
  return run_binary(std::move(lhs), std::move(rhs), DType::Bool, make_binary_kernel<bool, bool>(f),
                    op);
}

}  // namespace

// clang-format off
#define KILN_CPU_COMPARE(X)                                                                      \
  X(equal, kEqual) X(not_equal, kNotEqual) X(greater, kGreater) X(greater_equal, kGreaterEqual) \
  X(lower, kLower) X(lower_equal, kLowerEqual)
// clang-format on

#define KILN_CPU_COMPARE_METHODS(name, cmp)                   \
  Primitive CpuBackend::name(Primitive l, Primitive r) {      \
    return compare(std::move(l), std::move(r), #name, cmp);   \
  }                                                           \
  Primitive CpuBackend::name##_elem(Primitive x, Scalar v) {  \
    return compare_elem(std::move(x), v, #name "_elem", cmp); \
  }
KILN_CPU_COMPARE(KILN_CPU_COMPARE_METHODS)
#undef KILN_CPU_COMPARE_METHODS

namespace cpu {

bool compare_step_kernel(OpCode op, DType dtype, const StepParams& params, bool, OwnedKernel& k) {
  switch (op) {
#define KILN_CPU_COMPARE_CASES(name, cmp)                               \
  case OpCode::name:                                                    \
    make_compare(dtype, #name, cmp, k);                                 \
    return true;                                                        \
  case OpCode::name##_elem:                                             \
    make_compare_elem(dtype, params.scalars[0], #name "_elem", cmp, k); \
    return true;
    KILN_CPU_COMPARE(KILN_CPU_COMPARE_CASES)
#undef KILN_CPU_COMPARE_CASES
    default:
      return false;
  }
}

}  // namespace cpu

Primitive CpuBackend::is_nan(Primitive x) {
  return visit_float_kernel(x->dtype(), "is_nan", [&]<class T>(type_tag<T>) -> Primitive {
    constexpr auto f = [](T v) { return v != v; };
    return run_unary(std::move(x), DType::Bool, make_unary_kernel<bool, T>(f), "is_nan");
  });
}

Primitive CpuBackend::is_inf(Primitive x) {
  return visit_float_kernel(x->dtype(), "is_inf", [&]<class T>(type_tag<T>) -> Primitive {
    constexpr auto f = [](T v) { return std::isinf(v); };
    return run_unary(std::move(x), DType::Bool, make_unary_kernel<bool, T>(f), "is_inf");
  });
}

Primitive CpuBackend::logical_not(Primitive x) {
  constexpr auto f = [](bool v) { return !v; };
  return run_unary(std::move(x), DType::Bool, make_unary_kernel<bool, bool>(f), "logical_not");
}
Primitive CpuBackend::logical_and(Primitive l, Primitive r) {
  return bool_binary(std::move(l), std::move(r), "logical_and",
                     [](bool a, bool b) { return a && b; });
}
Primitive CpuBackend::logical_or(Primitive l, Primitive r) {
  return bool_binary(std::move(l), std::move(r), "logical_or",
                     [](bool a, bool b) { return a || b; });
}
Primitive CpuBackend::logical_xor(Primitive l, Primitive r) {
  return bool_binary(std::move(l), std::move(r), "logical_xor",
                     [](bool a, bool b) { return a != b; });
}

Primitive CpuBackend::bitwise_and(Primitive l, Primitive r) {
  return int_binary(std::move(l), std::move(r), "bitwise_and", kBitAnd);
}
Primitive CpuBackend::bitwise_or(Primitive l, Primitive r) {
  return int_binary(std::move(l), std::move(r), "bitwise_or", kBitOr);
}
Primitive CpuBackend::bitwise_xor(Primitive l, Primitive r) {
  return int_binary(std::move(l), std::move(r), "bitwise_xor", kBitXor);
}
Primitive CpuBackend::bitwise_left_shift(Primitive l, Primitive r) {
  return int_binary(std::move(l), std::move(r), "bitwise_left_shift", kShiftLeft);
}
Primitive CpuBackend::bitwise_right_shift(Primitive l, Primitive r) {
  return int_binary(std::move(l), std::move(r), "bitwise_right_shift", kShiftRight);
}
Primitive CpuBackend::bitwise_not(Primitive x) {
  const DType dtype = x->dtype();
  return visit_int_dtype(dtype, "bitwise_not", [&]<class T>(type_tag<T>) -> Primitive {
    using B = bits_t<T>;
    constexpr auto f = [](B a) { return static_cast<B>(~a); };
    return run_unary(std::move(x), dtype, make_unary_kernel<B, B>(f), "bitwise_not");
  });
}
Primitive CpuBackend::bitwise_and_scalar(Primitive x, Scalar v) {
  return int_scalar(std::move(x), v, "bitwise_and_scalar", kBitAnd);
}
Primitive CpuBackend::bitwise_or_scalar(Primitive x, Scalar v) {
  return int_scalar(std::move(x), v, "bitwise_or_scalar", kBitOr);
}
Primitive CpuBackend::bitwise_xor_scalar(Primitive x, Scalar v) {
  return int_scalar(std::move(x), v, "bitwise_xor_scalar", kBitXor);
}
Primitive CpuBackend::bitwise_left_shift_scalar(Primitive x, Scalar v) {
  return int_scalar(std::move(x), v, "bitwise_left_shift_scalar", kShiftLeft);
}
Primitive CpuBackend::bitwise_right_shift_scalar(Primitive x, Scalar v) {
  return int_scalar(std::move(x), v, "bitwise_right_shift_scalar", kShiftRight);
}

}  // namespace kiln
