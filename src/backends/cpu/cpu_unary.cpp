// Unary math: one generic kernel, one functor per function.
#include <cmath>
#include <limits>
#include <numbers>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/integer_math.h"
#include "backends/cpu/vector_math.h"

namespace kiln {

using namespace cpu;

namespace {

// libmvec's vector form of a function on a contiguous run; the context is the function.
template <class T>
void vector_loop(std::int64_t n, char* const* data, const std::int64_t*, const void* context) {
  vector_map(*static_cast<const VectorFunction*>(context), reinterpret_cast<const T*>(data[1]),
             reinterpret_cast<T*>(data[0]), n);
}

// Contiguous f32/f64 data takes libmvec's vector form of the function when there is one.
template <class F>
Primitive float_unary(Primitive x, const char* op, F f,
                      std::optional<VectorFunction> function = std::nullopt) {
  const DType dtype = x->dtype();
  if (vector_math_available() && function && (dtype == DType::F32 || dtype == DType::F64) &&
      as_cpu(x).is_contiguous()) {
    // A transcendental costs several adds, so threads pay off on runs four times shorter.
    const Kernel kernel{dtype == DType::F32 ? &vector_loop<float> : &vector_loop<double>,
                        &*function, dtype, dtype, 4};
    return run_unary(std::move(x), dtype, kernel, op);
  }
  return visit_float_kernel(dtype, op, [&]<class T>(type_tag<T>) -> Primitive {
    return run_unary(std::move(x), dtype, make_unary_kernel<T, T>(f), op);
  });
}

// erf's inverse: NaN outside [-1, 1], +-inf at +-1. A first guess from M. Giles' rational
// approximation ("Approximating the erfinv function", GPU Computing Gems, 2010; accurate to
// about 1e-7), then two Halley steps on f(x) = erf(x) - y in double; near +-1, f is taken as
// erfc's complement so that the steps do not cancel it away.
double inverse_erf(double y) {
  if (std::isnan(y) || y < -1.0 || y > 1.0) return std::numeric_limits<double>::quiet_NaN();
  if (y == 1.0 || y == -1.0) return std::copysign(std::numeric_limits<double>::infinity(), y);
  const double a = std::fabs(y);
  double w = -std::log((1.0 - a) * (1.0 + a));
  double p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                     -0.00417768164, 0.246640727, 1.50140941}) {
      p = c + p * w;
    }
  } else {
    w = std::sqrt(w) - 3.0;
    p = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                     0.00943887047, 1.00167406, 2.83297682}) {
      p = c + p * w;
    }
  }
  double x = p * a;
  for (int step = 0; step < 2; ++step) {
    const double f = a > 0.5 ? (1.0 - a) - std::erfc(x) : std::erf(x) - a;
    const double slope = 2.0 * std::numbers::inv_sqrtpi * std::exp(-x * x);
    x -= f / (slope + x * f);  // Halley: f'' = -2x f'
  }
  return std::copysign(x, y);
}

// Sign-blind ops (neg and square wrap) take one kernel per integer width.
template <bool kSignBlind, class F>
Primitive numeric_unary(Primitive x, const char* op, F f) {
  const DType dtype = x->dtype();
  return visit_numeric_kernel(dtype, op, [&]<class T>(type_tag<T>) -> Primitive {
    using K = std::conditional_t<kSignBlind, bits_t<T>, T>;
    return run_unary(std::move(x), dtype, make_unary_kernel<K, K>(f), op);
  });
}

}  // namespace

#define KILN_CPU_FLOAT_UNARY(name, expression)                                  \
  Primitive CpuBackend::name(Primitive x) {                                     \
    return float_unary(std::move(x), #name, [](auto v) { return expression; }); \
  }
#define KILN_CPU_VECTOR_UNARY(name, Name)                                                \
  Primitive CpuBackend::name(Primitive x) {                                              \
    return float_unary(                                                                  \
        std::move(x), #name, [](auto v) { return std::name(v); }, VectorFunction::Name); \
  }
KILN_CPU_FLOAT_UNARY(recip, decltype(v)(1) / v)
KILN_CPU_VECTOR_UNARY(exp, Exp)
KILN_CPU_VECTOR_UNARY(expm1, Expm1)
KILN_CPU_VECTOR_UNARY(exp2, Exp2)
KILN_CPU_VECTOR_UNARY(log, Log)
KILN_CPU_VECTOR_UNARY(log1p, Log1p)
KILN_CPU_VECTOR_UNARY(log2, Log2)
KILN_CPU_VECTOR_UNARY(log10, Log10)
KILN_CPU_FLOAT_UNARY(sqrt, std::sqrt(v))
KILN_CPU_FLOAT_UNARY(rsqrt, decltype(v)(1) / std::sqrt(v))
KILN_CPU_VECTOR_UNARY(sin, Sin)
KILN_CPU_VECTOR_UNARY(cos, Cos)
KILN_CPU_VECTOR_UNARY(tan, Tan)
KILN_CPU_VECTOR_UNARY(asin, Asin)
KILN_CPU_VECTOR_UNARY(acos, Acos)
KILN_CPU_VECTOR_UNARY(atan, Atan)
KILN_CPU_VECTOR_UNARY(sinh, Sinh)
KILN_CPU_VECTOR_UNARY(cosh, Cosh)
KILN_CPU_VECTOR_UNARY(tanh, Tanh)
KILN_CPU_VECTOR_UNARY(asinh, Asinh)
KILN_CPU_VECTOR_UNARY(acosh, Acosh)
KILN_CPU_VECTOR_UNARY(atanh, Atanh)
KILN_CPU_VECTOR_UNARY(erf, Erf)
KILN_CPU_FLOAT_UNARY(erfinv, static_cast<decltype(v)>(inverse_erf(static_cast<double>(v))))
KILN_CPU_FLOAT_UNARY(round, std::nearbyint(v))  // half to even, as PyTorch
KILN_CPU_FLOAT_UNARY(floor, std::floor(v))
KILN_CPU_FLOAT_UNARY(ceil, std::ceil(v))
KILN_CPU_FLOAT_UNARY(trunc, std::trunc(v))
#undef KILN_CPU_FLOAT_UNARY
#undef KILN_CPU_VECTOR_UNARY

Primitive CpuBackend::abs(Primitive x) {
  return numeric_unary<false>(std::move(x), "abs", [](auto v) {
    using T = decltype(v);
    if constexpr (std::is_unsigned_v<T>) {
      return v;
    } else if constexpr (std::is_integral_v<T>) {
      return v < 0 ? wrap_sub(T(0), v) : v;
    } else {
      return std::fabs(v);
    }
  });
}

Primitive CpuBackend::sign(Primitive x) {
  return numeric_unary<false>(std::move(x), "sign", [](auto v) {
    using T = decltype(v);
    if constexpr (std::is_floating_point_v<T>) {
      if (v != v) return v;
    }
    return static_cast<T>((T(0) < v) - (v < T(0)));
  });
}

Primitive CpuBackend::square(Primitive x) {
  return numeric_unary<true>(std::move(x), "square", [](auto v) { return wrap_mul(v, v); });
}

Primitive CpuBackend::neg(Primitive x) {
  return numeric_unary<true>(std::move(x), "neg", [](auto v) {
    if constexpr (std::is_floating_point_v<decltype(v)>) {
      return -v;  // -(+0) is -0
    } else {
      return wrap_sub(decltype(v)(0), v);
    }
  });
}

}  // namespace kiln
