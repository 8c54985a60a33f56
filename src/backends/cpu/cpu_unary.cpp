// Unary math: one generic kernel, one functor per function.
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/integer_math.h"
#include "backends/cpu/vector_math.h"

namespace kiln {

using namespace cpu;

namespace {

// Contiguous f32/f64 data takes libmvec's vector form of the function when there is one.
template <class T>
Primitive vector_unary(Primitive x, VectorFunction function) {
  const Shape& shape = x->shape();
  std::shared_ptr<CpuTensor> out = reusable_as_output(x, shape, x->dtype())
                                       ? std::static_pointer_cast<CpuTensor>(x)
                                       : make_tensor(x->dtype(), shape);
  const T* in = as_cpu(x).data_as<T>();
  T* o = out->data_as<T>();
  parallel_for(shape.num_elements(), kParallelGrain / 4, [&](std::int64_t b, std::int64_t e) {
    vector_map(function, in + b, o + b, e - b);
  });
  return out;
}

template <class F>
Primitive float_unary(Primitive x, const char* op, F f,
                      std::optional<VectorFunction> function = std::nullopt) {
  const DType dtype = x->dtype();
  if (vector_math_available() && function && (dtype == DType::F32 || dtype == DType::F64) &&
      as_cpu(x).is_contiguous()) {
    return dtype == DType::F32 ? vector_unary<float>(std::move(x), *function)
                               : vector_unary<double>(std::move(x), *function);
  }
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

#define KILN_CPU_FLOAT_UNARY(name, expression)                                     \
  Primitive CpuBackend::name(Primitive x) {                                        \
    return float_unary(std::move(x), #name, [](auto v) { return expression; });    \
  }
#define KILN_CPU_VECTOR_UNARY(name, Name)                                            \
  Primitive CpuBackend::name(Primitive x) {                                          \
    return float_unary(std::move(x), #name, [](auto v) { return std::name(v); },     \
                       VectorFunction::Name);                                        \
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
KILN_CPU_FLOAT_UNARY(round, std::nearbyint(v))  // half to even, as PyTorch
KILN_CPU_FLOAT_UNARY(floor, std::floor(v))
KILN_CPU_FLOAT_UNARY(ceil, std::ceil(v))
KILN_CPU_FLOAT_UNARY(trunc, std::trunc(v))
#undef KILN_CPU_FLOAT_UNARY
#undef KILN_CPU_VECTOR_UNARY

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
  return numeric_unary(std::move(x), "neg", [](auto v) {
    if constexpr (std::is_floating_point_v<decltype(v)>) return -v;  // -(+0) is -0
    else return wrap_sub(decltype(v)(0), v);
  });
}

}  // namespace kiln
