// Vectorised transcendental functions from glibc's libmvec (the SIMD variants GCC itself calls
// when it vectorises math with -ffast-math), used directly so kiln keeps IEEE semantics for
// everything else. Accuracy: within 4 ulp; special values (NaN, inf) follow the scalar function.
// Chosen at compile time from the target ISA (-march): AVX-512, else AVX2, else none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

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

// T's lanes in one vector of the target's widest registers (64 bytes with AVX-512, else 32), as
// GCC's vector extension: loops over an array of lanes, which GCC leaves scalar, written over one
// of these instead (lanes_max, layer norm's sums). Not wider than the registers: GCC lowers a
// 64-byte vector's selects and reductions on AVX2 to scalar code through the stack (softmax over
// rows of 128 took 2.4 ms where torch takes 1.3 on a Zen 3 machine, layer norm 0.64 against 0.36).
#if defined(__AVX512F__)
inline constexpr std::size_t kNativeVectorBytes = 64;
#else
inline constexpr std::size_t kNativeVectorBytes = 32;
#endif
template <class T>
struct NativeVector;
template <>
struct NativeVector<float> {
  using type = float __attribute__((vector_size(kNativeVectorBytes)));
};
template <>
struct NativeVector<double> {
  using type = double __attribute__((vector_size(kNativeVectorBytes)));
};
template <class T>
using native_vector_t = typename NativeVector<T>::type;

// The largest of v[0 .. n) (NaN never replaces a value, as `if (v > top) top = v`), over the
// lanes of one native vector: a single running maximum is a chain of dependent compares, and
// GCC leaves an array of lanes scalar (softmax's max pass was a sixth of its time).
template <class C>
inline C lanes_max(const C* v, std::int64_t n) {
  using Lanes = native_vector_t<C>;
  constexpr std::int64_t kLanes = kNativeVectorBytes / sizeof(C);
  Lanes lanes;
  for (std::int64_t j = 0; j < kLanes; ++j) lanes[j] = -std::numeric_limits<C>::infinity();
  std::int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    Lanes x;
    std::memcpy(&x, v + k, sizeof x);
    lanes = x > lanes ? x : lanes;
  }
  C top = -std::numeric_limits<C>::infinity();
  for (std::int64_t j = 0; j < kLanes; ++j) top = lanes[j] > top ? lanes[j] : top;
  for (; k < n; ++k) top = v[k] > top ? v[k] : top;
  return top;
}

// One native vector's bools, and the same lanes as integer masks as wide as C.
template <class C>
struct MaskLanes;
template <>
struct MaskLanes<float> {
  using bytes = std::uint8_t __attribute__((vector_size(kNativeVectorBytes / 4)));
  using masks = std::int32_t __attribute__((vector_size(kNativeVectorBytes)));
};
template <>
struct MaskLanes<double> {
  using bytes = std::uint8_t __attribute__((vector_size(kNativeVectorBytes / 8)));
  using masks = std::int64_t __attribute__((vector_size(kNativeVectorBytes)));
};

// v[j] = value wherever mask[j] is true, over the lanes of one native vector (the bools widened
// to lane masks): GCC leaves `v[j] = mask[j] ? value : v[j]` a loop of branches and single
// stores (attention's masking pass).
template <class C>
inline void fill_where(C* v, const bool* mask, std::int64_t n, C value) {
  std::int64_t k = 0;
#if defined(KILN_VECTOR_MATH) && defined(__AVX512BW__) && defined(__AVX512VL__)
  if constexpr (std::is_same_v<C, float>) {
    // A byte test makes the lane mask at once (GCC widens the bools below byte by byte).
    const __m512 fill = _mm512_set1_ps(value);
    const __m128i ones = _mm_set1_epi8(-1);
    for (; k + 16 <= n; k += 16) {
      const __mmask16 m =
          _mm_test_epi8_mask(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mask + k)), ones);
      _mm512_mask_storeu_ps(v + k, m, fill);
    }
  } else
#endif
  {
    using Lanes = native_vector_t<C>;
    constexpr std::int64_t kLanes = kNativeVectorBytes / sizeof(C);
    using Bytes = typename MaskLanes<C>::bytes;
    using Masks = typename MaskLanes<C>::masks;
    Lanes fill;
    for (std::int64_t j = 0; j < kLanes; ++j) fill[j] = value;
    for (; k + kLanes <= n; k += kLanes) {
      Bytes b;
      std::memcpy(&b, mask + k, sizeof b);
      const Masks m = __builtin_convertvector(b, Masks) != 0;
      Lanes x;
      std::memcpy(&x, v + k, sizeof x);
      x = m ? fill : x;
      std::memcpy(v + k, &x, sizeof x);
    }
  }
  for (; k < n; ++k) v[k] = mask[k] ? value : v[k];
}

bool vector_map(VectorFunction function, const float* in, float* out, std::int64_t n) noexcept;
bool vector_map(VectorFunction function, const double* in, double* out, std::int64_t n) noexcept;

// Softmax's middle pass in one: out[i] = exp(in[i] - shift) for contiguous arrays, and the sum of
// out in double, over 8 partial sums (out[i] into sum i % 8, the sums added in order at the end;
// each run of 16 vectors is first added in float lanes: 256 elements with AVX-512, 128 with
// AVX2), so a row's sum does not depend on where its run starts. For in[i] - shift <= 0 or NaN
// (the shift is the row's maximum): AVX-512 builds use an inline exp (vector_math.cpp) for every
// element, AVX2 builds the same inline exp down to -87 (libmvec's without FMA), the scalar exp
// for the subnormal results below and past the last full vector. Returns false
// when no vector form exists. out may be in, or nullptr for the sum alone. fetch, where given,
// is n floats a later call reads (the next row): their lines are pulled towards the core one per
// vector of this call's exponentials, so that the next row's reads from memory overlap this
// row's arithmetic instead of following it.
bool vector_exp_sum(const float* in, float shift, float* out, std::int64_t n, double& sum,
                    const float* fetch = nullptr) noexcept;

}  // namespace kiln::cpu
