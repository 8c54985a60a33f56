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

// The kernel of a float function f: libmvec's vector form of it where there is one and the runs
// are contiguous f32/f64, else f element by element.
template <class F>
void make_float_unary(DType dtype, const char* op, F f, std::optional<VectorFunction> function,
                      bool contiguous, OwnedKernel& k) {
  if (vector_math_available() && function && (dtype == DType::F32 || dtype == DType::F64) &&
      contiguous) {
    // A transcendental costs several adds, so threads pay off on runs four times shorter.
    k.set(dtype == DType::F32 ? &vector_loop<float> : &vector_loop<double>, *function, dtype, dtype,
          4);
    return;
  }
  visit_float_kernel(dtype, op, [&]<class T>(type_tag<T>) { k.unary<T, T>(f); });
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
void make_numeric_unary(DType dtype, const char* op, F f, OwnedKernel& k) {
  visit_numeric_kernel(dtype, op, [&]<class T>(type_tag<T>) {
    using K = std::conditional_t<kSignBlind, bits_t<T>, T>;
    k.unary<K, K>(f);
  });
}

// The functions of this file, each a maker of its kernel: (name, function of v) for float maps,
// (name, std::name, VectorFunction) for those with a vector form, (name, sign-blind, function)
// for numeric maps. Both their CpuBackend methods and their fused steps' kernels come from here.
// clang-format off
#define KILN_CPU_FLOAT_UNARY_OPS(X)                                                      \
  X(recip, decltype(v)(1) / v) X(sqrt, std::sqrt(v)) X(rsqrt, decltype(v)(1) / std::sqrt(v)) \
  X(erfinv, static_cast<decltype(v)>(inverse_erf(static_cast<double>(v))))             \
  X(round, std::nearbyint(v)) /* half to even, as PyTorch */                            \
  X(floor, std::floor(v)) X(ceil, std::ceil(v)) X(trunc, std::trunc(v))
#define KILN_CPU_VECTOR_UNARY_OPS(X)                                                         \
  X(exp, Exp) X(expm1, Expm1) X(exp2, Exp2) X(log, Log) X(log1p, Log1p) X(log2, Log2)      \
  X(log10, Log10) X(sin, Sin) X(cos, Cos) X(tan, Tan) X(asin, Asin) X(acos, Acos)          \
  X(atan, Atan) X(sinh, Sinh) X(cosh, Cosh) X(tanh, Tanh) X(asinh, Asinh) X(acosh, Acosh) \
  X(atanh, Atanh) X(erf, Erf)
#define KILN_CPU_NUMERIC_UNARY_OPS(X) X(abs, false) X(sign, false) X(square, true) X(neg, true)
// clang-format on

#define KILN_CPU_FLOAT_MAKER(name, expression)                                         \
  void make_##name(DType dtype, const StepParams&, bool contiguous, OwnedKernel& k) {  \
    make_float_unary(                                                                  \
        dtype, #name, [](auto v) { return expression; }, std::nullopt, contiguous, k); \
  }
KILN_CPU_FLOAT_UNARY_OPS(KILN_CPU_FLOAT_MAKER)
#undef KILN_CPU_FLOAT_MAKER
#define KILN_CPU_VECTOR_MAKER(name, Name)                                                        \
  void make_##name(DType dtype, const StepParams&, bool contiguous, OwnedKernel& k) {            \
    make_float_unary(                                                                            \
        dtype, #name, [](auto v) { return std::name(v); }, VectorFunction::Name, contiguous, k); \
  }
KILN_CPU_VECTOR_UNARY_OPS(KILN_CPU_VECTOR_MAKER)
#undef KILN_CPU_VECTOR_MAKER

auto abs_of = [](auto v) {
  using T = decltype(v);
  if constexpr (std::is_unsigned_v<T>) {
    return v;
  } else if constexpr (std::is_integral_v<T>) {
    return v < 0 ? wrap_sub(T(0), v) : v;
  } else {
    return std::fabs(v);
  }
};
auto sign_of = [](auto v) {
  using T = decltype(v);
  if constexpr (std::is_floating_point_v<T>) {
    if (v != v) return v;
  }
  return static_cast<T>((T(0) < v) - (v < T(0)));
};
auto square_of = [](auto v) { return wrap_mul(v, v); };
auto neg_of = [](auto v) {
  if constexpr (std::is_floating_point_v<decltype(v)>) {
    return -v;  // -(+0) is -0
  } else {
    return wrap_sub(decltype(v)(0), v);
  }
};
#define KILN_CPU_NUMERIC_MAKER(name, sign_blind)                           \
  void make_##name(DType dtype, const StepParams&, bool, OwnedKernel& k) { \
    make_numeric_unary<sign_blind>(dtype, #name, name##_of, k);            \
  }
KILN_CPU_NUMERIC_UNARY_OPS(KILN_CPU_NUMERIC_MAKER)
#undef KILN_CPU_NUMERIC_MAKER

// x through a maker's kernel: the vector form when x is contiguous.
Primitive run_made(Primitive x, const char* op,
                   void (*make)(DType, const StepParams&, bool, OwnedKernel&)) {
  const DType dtype = x->dtype();
  OwnedKernel k;
  make(dtype, {}, as_cpu(x).is_contiguous(), k);
  return run_unary(std::move(x), dtype, k.kernel(), op);
}

}  // namespace

#define KILN_CPU_UNARY_METHOD(name, ...) \
  Primitive CpuBackend::name(Primitive x) { return run_made(std::move(x), #name, make_##name); }
KILN_CPU_FLOAT_UNARY_OPS(KILN_CPU_UNARY_METHOD)
KILN_CPU_VECTOR_UNARY_OPS(KILN_CPU_UNARY_METHOD)
KILN_CPU_NUMERIC_UNARY_OPS(KILN_CPU_UNARY_METHOD)

namespace cpu {

bool unary_step_kernel(OpCode op, DType dtype, const StepParams& params, bool contiguous,
                       OwnedKernel& k) {
  switch (op) {
    KILN_CPU_FLOAT_UNARY_OPS(KILN_CPU_STEP_KERNEL_CASE)
    KILN_CPU_VECTOR_UNARY_OPS(KILN_CPU_STEP_KERNEL_CASE)
    KILN_CPU_NUMERIC_UNARY_OPS(KILN_CPU_STEP_KERNEL_CASE)
    default:
      return false;
  }
}

}  // namespace cpu
#undef KILN_CPU_UNARY_METHOD

}  // namespace kiln
