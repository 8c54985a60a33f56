// Vectorised transcendental functions from glibc's libmvec (the SIMD variants GCC itself calls
// when it vectorises math with -ffast-math), used directly so kiln keeps IEEE semantics for
// everything else. Accuracy: within 4 ulp; special values (NaN, inf) follow the scalar function.
// Chosen at compile time from the target ISA (-march): AVX-512, else AVX2, else none.
#pragma once

#include <cstdint>

#if defined(KILN_HAVE_LIBMVEC) && (defined(__AVX512F__) || defined(__AVX2__))
#include <immintrin.h>
#define KILN_VECTOR_MATH 1
#endif

namespace kiln::cpu {

// Applies the vector form of a function to contiguous arrays; returns false when no vector
// form exists (the caller then runs the scalar loop).
enum class VectorFunction : std::uint8_t {
  Exp,
  Expm1,
  Exp2,
  Log,
  Log1p,
  Log2,
  Log10,
  Sin,
  Cos,
  Tan,
  Asin,
  Acos,
  Atan,
  Sinh,
  Cosh,
  Tanh,
  Asinh,
  Acosh,
  Atanh,
  Erf,
  Erfc,  // gelu's Phi (cpu_activation.cpp); no op of its own
};

// Whether this build has vector forms at all.
constexpr bool vector_math_available() noexcept {
#if defined(KILN_VECTOR_MATH)
  return true;
#else
  return false;
#endif
}

// T's lanes in one 64-byte vector, as GCC's vector extension: loops over an array of lanes, which
// GCC leaves scalar, written over one of these instead (lanes_max, layer norm's sums).
template <class T>
struct Vector64;
template <>
struct Vector64<float> {
  using type = float __attribute__((vector_size(64)));
};
template <>
struct Vector64<double> {
  using type = double __attribute__((vector_size(64)));
};
template <class T>
using vector64_t = typename Vector64<T>::type;

bool vector_map(VectorFunction function, const float* in, float* out, std::int64_t n) noexcept;
bool vector_map(VectorFunction function, const double* in, double* out, std::int64_t n) noexcept;

// Softmax's middle pass in one: out[i] = exp(in[i] - shift) for contiguous arrays, and the sum of
// out in double, over 8 partial sums (out[i] into sum i % 8, the sums added in order at the end;
// AVX-512 builds first add each run of 256 elements in 16 float lanes), so a row's sum does not
// depend on where its run starts. For in[i] - shift <= 0 or NaN (the
// shift is the row's maximum): AVX-512 builds use an inline exp (vector_math.cpp) for every
// element, AVX2 builds libmvec's with the scalar exp past the last full vector. Returns false
// when no vector form exists. out may be in, or nullptr for the sum alone.
bool vector_exp_sum(const float* in, float shift, float* out, std::int64_t n, double& sum) noexcept;

}  // namespace kiln::cpu
