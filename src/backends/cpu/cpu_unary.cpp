// Unary math: one generic kernel, one functor per function.
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/integer_math.h"

namespace kiln {

using namespace cpu;

namespace {

template <class F>
Primitive float_unary(Primitive x, const char* op, F f) {
  const DType dtype = x->dtype();
  return visit_float_dtype(dtype, op, [&]<class T>(type_tag<T>) -> Primitive {
    return map_unary<T, T>(std::move(x), dtype, f);
  });
}

template <class F>
Primitive numeric_unary(Primitive x, const char* op, F f) {
  const DType dtype = x->dtype();
  return visit_numeric_dtype(dtype, op, [&]<class T>(type_tag<T>) -> Primitive {
    return map_unary<T, T>(std::move(x), dtype, f);
  });
}

}  // namespace

#define KILN_CPU_FLOAT_UNARY(name, expression)                              \
  Primitive CpuBackend::name(Primitive x) {                                 \
    return float_unary(std::move(x), #name, [](auto v) { return expression; }); \
  }
KILN_CPU_FLOAT_UNARY(recip, decltype(v)(1) / v)
KILN_CPU_FLOAT_UNARY(exp, std::exp(v))
KILN_CPU_FLOAT_UNARY(expm1, std::expm1(v))
KILN_CPU_FLOAT_UNARY(exp2, std::exp2(v))
KILN_CPU_FLOAT_UNARY(log, std::log(v))
KILN_CPU_FLOAT_UNARY(log1p, std::log1p(v))
KILN_CPU_FLOAT_UNARY(log2, std::log2(v))
KILN_CPU_FLOAT_UNARY(log10, std::log10(v))
KILN_CPU_FLOAT_UNARY(sqrt, std::sqrt(v))
KILN_CPU_FLOAT_UNARY(rsqrt, decltype(v)(1) / std::sqrt(v))
KILN_CPU_FLOAT_UNARY(sin, std::sin(v))
KILN_CPU_FLOAT_UNARY(cos, std::cos(v))
KILN_CPU_FLOAT_UNARY(tan, std::tan(v))
KILN_CPU_FLOAT_UNARY(asin, std::asin(v))
KILN_CPU_FLOAT_UNARY(acos, std::acos(v))
KILN_CPU_FLOAT_UNARY(atan, std::atan(v))
KILN_CPU_FLOAT_UNARY(sinh, std::sinh(v))
KILN_CPU_FLOAT_UNARY(cosh, std::cosh(v))
KILN_CPU_FLOAT_UNARY(tanh, std::tanh(v))
KILN_CPU_FLOAT_UNARY(asinh, std::asinh(v))
KILN_CPU_FLOAT_UNARY(acosh, std::acosh(v))
KILN_CPU_FLOAT_UNARY(atanh, std::atanh(v))
KILN_CPU_FLOAT_UNARY(erf, std::erf(v))
KILN_CPU_FLOAT_UNARY(round, std::nearbyint(v))  // half to even, as PyTorch
KILN_CPU_FLOAT_UNARY(floor, std::floor(v))
KILN_CPU_FLOAT_UNARY(ceil, std::ceil(v))
KILN_CPU_FLOAT_UNARY(trunc, std::trunc(v))
#undef KILN_CPU_FLOAT_UNARY

Primitive CpuBackend::abs(Primitive x) {
  return numeric_unary(std::move(x), "abs", [](auto v) {
    using T = decltype(v);
    if constexpr (std::is_unsigned_v<T>) return v;
    else if constexpr (std::is_integral_v<T>) return v < 0 ? wrap_sub(T(0), v) : v;
    else return std::fabs(v);
  });
}

Primitive CpuBackend::sign(Primitive x) {
  return numeric_unary(std::move(x), "sign", [](auto v) {
    using T = decltype(v);
    if constexpr (std::is_floating_point_v<T>) {
      if (v != v) return v;
    }
    return static_cast<T>((T(0) < v) - (v < T(0)));
  });
}

Primitive CpuBackend::square(Primitive x) {
  return numeric_unary(std::move(x), "square", [](auto v) { return wrap_mul(v, v); });
}

Primitive CpuBackend::neg(Primitive x) {
  return numeric_unary(std::move(x), "neg", [](auto v) { return wrap_sub(decltype(v)(0), v); });
}

}  // namespace kiln
