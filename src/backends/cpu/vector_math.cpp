#include "backends/cpu/vector_math.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace kiln::cpu {

#if defined(KILN_VECTOR_MATH)

#if defined(__AVX512F__)
using FloatVector = __m512;
using DoubleVector = __m512d;
constexpr std::int64_t kFloatLanes = 16, kDoubleLanes = 8;
#define KILN_MVEC_F(name) _ZGVeN16v_##name##f
#define KILN_MVEC_D(name) _ZGVeN8v_##name
inline FloatVector load(const float* p) { return _mm512_loadu_ps(p); }
inline DoubleVector load(const double* p) { return _mm512_loadu_pd(p); }
inline void store(float* p, FloatVector v) { _mm512_storeu_ps(p, v); }
inline void store(double* p, DoubleVector v) { _mm512_storeu_pd(p, v); }
#else
using FloatVector = __m256;
using DoubleVector = __m256d;
constexpr std::int64_t kFloatLanes = 8, kDoubleLanes = 4;
#define KILN_MVEC_F(name) _ZGVdN8v_##name##f
#define KILN_MVEC_D(name) _ZGVdN4v_##name
inline FloatVector load(const float* p) { return _mm256_loadu_ps(p); }
inline DoubleVector load(const double* p) { return _mm256_loadu_pd(p); }
inline void store(float* p, FloatVector v) { _mm256_storeu_ps(p, v); }
inline void store(double* p, DoubleVector v) { _mm256_storeu_pd(p, v); }
#endif

// Lists of macro calls, laid out as tables.
// clang-format off
#define KILN_MVEC_FUNCTIONS(X) \
  X(exp) X(expm1) X(exp2) X(log) X(log1p) X(log2) X(log10) X(sin) X(cos) X(tan) X(asin) \
  X(acos) X(atan) X(sinh) X(cosh) X(tanh) X(asinh) X(acosh) X(atanh) X(erf) X(erfc)
// clang-format on

extern "C" {
#define KILN_DECLARE_MVEC(name)                        \
  FloatVector KILN_MVEC_F(name)(FloatVector) noexcept; \
  DoubleVector KILN_MVEC_D(name)(DoubleVector) noexcept;
KILN_MVEC_FUNCTIONS(KILN_DECLARE_MVEC)
#undef KILN_DECLARE_MVEC
}

namespace {

// The tail shorter than a vector goes through the vector function too, on a padded copy: libm's
// scalar function rounds some values differently, and a run's tail falls wherever the caller
// split its elements (threads, pieces), so results would depend on the thread count.
template <class T, class Vector, class VectorFn>
void apply(const T* in, T* out, std::int64_t n, std::int64_t lanes, VectorFn vf) {
  std::int64_t i = 0;
  for (; i + lanes <= n; i += lanes) store(out + i, vf(load(in + i)));
  if (i == n) return;
  alignas(64) T padded[64 / sizeof(T)];
  const std::int64_t rest = n - i;
  for (std::int64_t k = 0; k < lanes; ++k) padded[k] = in[i + (k < rest ? k : 0)];
  store(padded, vf(load(padded)));
  for (std::int64_t k = 0; k < rest; ++k) out[i + k] = padded[k];
}

}  // namespace

#define KILN_CASE(name, Name)                                                       \
  case VectorFunction::Name:                                                        \
    apply<T, Vector>(in, out, n, lanes, [](Vector v) { return vector_##name(v); }); \
    return true;

#define KILN_WRAP(name)                                                            \
  inline FloatVector vector_##name(FloatVector v) { return KILN_MVEC_F(name)(v); } \
  inline DoubleVector vector_##name(DoubleVector v) { return KILN_MVEC_D(name)(v); }
KILN_MVEC_FUNCTIONS(KILN_WRAP)
#undef KILN_WRAP

template <class T, class Vector>
bool dispatch(VectorFunction function, const T* in, T* out, std::int64_t n, std::int64_t lanes) {
  switch (function) {
    // clang-format off
    KILN_CASE(exp, Exp) KILN_CASE(expm1, Expm1) KILN_CASE(exp2, Exp2) KILN_CASE(log, Log)
    KILN_CASE(log1p, Log1p) KILN_CASE(log2, Log2) KILN_CASE(log10, Log10) KILN_CASE(sin, Sin)
    KILN_CASE(cos, Cos) KILN_CASE(tan, Tan) KILN_CASE(asin, Asin) KILN_CASE(acos, Acos)
    KILN_CASE(atan, Atan) KILN_CASE(sinh, Sinh) KILN_CASE(cosh, Cosh) KILN_CASE(tanh, Tanh)
    KILN_CASE(asinh, Asinh) KILN_CASE(acosh, Acosh) KILN_CASE(atanh, Atanh) KILN_CASE(erf, Erf)
    KILN_CASE(erfc, Erfc)
    // clang-format on
  }
  return false;
}
#undef KILN_CASE

bool vector_map(VectorFunction function, const float* in, float* out, std::int64_t n) noexcept {
  return dispatch<float, FloatVector>(function, in, out, n, kFloatLanes);
}
bool vector_map(VectorFunction function, const double* in, double* out, std::int64_t n) noexcept {
  return dispatch<double, DoubleVector>(function, in, out, n, kDoubleLanes);
}

// The inline exp's constants (exp_nonpositive, exp_normal_nonpositive): log2(e), ln2 in two
// parts, and the coefficients of Cephes' degree-5 minimax fit P(r), highest degree first.
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2High = 0.693359375f, kLn2Low = -2.12194440e-4f;
constexpr float kExpPoly[] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                              4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

#if defined(__AVX512F__)
// e^x for x <= 0 (or NaN), inline: softmax's exponentials were a third of its time as calls to
// libmvec, whose expf also leaves its fast path for results below the normal range (a row that
// holds Hugging Face's additive -3.4e38 mask took three times as long). x = n ln2 + r with
// |r| <= ln2 / 2 (ln2 in two parts, so n ln2 is exact enough), e^r = 1 + r + r^2 P(r) with P
// Cephes' degree-5 minimax fit (within 2 ulp), and scalef multiplies by 2^n with one rounding,
// subnormal results included. Below -103.98 every result rounds to 0 (e^-103.98 is less than
// half the least subnormal): those lanes are zeroed by scalef's mask rather than computed, since
// an underflowing scalef costs a microcode assist a vector (a quarter of the keys under Hugging
// Face's additive -3.4e38 mask made softmax three times as slow). Clamping at -104 keeps -inf
// from making n ln2 - x a NaN (max returns its second operand for a NaN x, so NaN stays NaN;
// the mask keeps NaN lanes too). (The masked forms with every lane set: GCC 12's plain ones
// start from an undefined vector and warn of it.)
inline __m512 exp_nonpositive(__m512 x) {
  constexpr __mmask16 kAll = 0xffff;
  const __mmask16 nonzero = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-103.98f), _CMP_NLT_UQ);
  x = _mm512_maskz_max_ps(kAll, _mm512_set1_ps(-104.0f), x);
  const __m512 n = _mm512_maskz_roundscale_ps(kAll, _mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2High), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Low), r);
  __m512 p = _mm512_set1_ps(kExpPoly[0]);
  for (std::size_t k = 1; k < std::size(kExpPoly); ++k)
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpPoly[k]));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_scalef_ps(nonzero, p, n);
}
#else
// libmvec's expf leaves its fast path for results below the normal range (x below about -87.3),
// calling the scalar function lane by lane: a softmax over scores that hold an additive mask
// (-3.4e38, as Hugging Face models write it) took three times as long. Below kFastExpFloor the
// vector form gets the floor instead; lanes below kExpZero are then exactly 0 (exp rounds to 0
// there in f32: e^-103.98 is half the least subnormal), and the few between get the scalar exp.
constexpr float kFastExpFloor = -87.0f;
constexpr float kExpZero = -103.98f;

// Redoes the lanes of out[0, lanes) that bit k of middle names (an argument in
// [kExpZero, kFastExpFloor)) with the scalar exp, which rounds their subnormal results. The
// arguments come from the caller: out may be where they were read from.
void redo_subnormal_lanes(const float* arguments, float* out, unsigned middle, int lanes) {
  for (int k = 0; k < lanes; ++k) {
    if ((middle >> k & 1u) != 0) out[k] = std::exp(arguments[k]);
  }
}

#if defined(__FMA__)
// e^x for x in [kFastExpFloor, 0] (or NaN), inline: the AVX-512 form's reduction and polynomial
// (exp_nonpositive above), with 2^n made from its exponent bits, exact for these x (every
// result is normal), so the values are the AVX-512 form's. libmvec's call and its own range
// checks were about half of a softmax over rows of 128 on a Zen 3 core. NaN stays NaN (p is NaN,
// whatever the exponent bits of a NaN n are).
inline __m256 exp_normal_nonpositive(__m256 x) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2High), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Low), r);
  __m256 p = _mm256_set1_ps(kExpPoly[0]);
  for (std::size_t k = 1; k < std::size(kExpPoly); ++k)
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpPoly[k]));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i scale =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(scale));
}
#else
inline __m256 exp_normal_nonpositive(__m256 x) { return vector_exp(x); }
#endif

#endif

bool vector_exp_sum(const float* in, float shift, float* out, std::int64_t n, double& sum,
                    const float* fetch) noexcept {
  double lanes[8] = {};
  std::int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 offset = _mm512_set1_ps(shift);
  __m512d partial = _mm512_setzero_pd();
  // Float lane j sums elements j, j + 16, ... of up to kBlock vectors, then goes into double
  // lane j % 8 (its halves in order): the conversions per vector were a fifth of a row's
  // softmax, and a float lane adds at most 16 terms.
  constexpr std::int64_t kBlock = 16 * kFloatLanes;
  auto flush = [&](__m512 block) {
    partial = _mm512_add_pd(
        partial, _mm512_maskz_cvtps_pd(0xff, _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(
                                                 0xff, _mm512_castps_pd(block), 0))));
    partial = _mm512_add_pd(
        partial, _mm512_maskz_cvtps_pd(0xff, _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(
                                                 0xff, _mm512_castps_pd(block), 1))));
  };
  // Whole vectors, then the tail through the same exp under a mask (its lanes past n are 0), so
  // an element's value and the partial sum it joins do not depend on where a run ends.
  for (std::int64_t start = 0; start < n; start += kBlock) {
    __m512 block = _mm512_setzero_ps();
    for (i = start; i < std::min(n, start + kBlock); i += kFloatLanes) {
      const auto live = static_cast<__mmask16>(n - i >= kFloatLanes ? 0xffff : (1u << (n - i)) - 1);
      // Into L2 (as cpu_fused.cpp's fetch_ahead): softmax 4096², 2 threads, 3.32-3.44 ms against
      // 3.45-3.64 into L1, two libraries interleaved over four rounds.
      if (fetch != nullptr) _mm_prefetch(reinterpret_cast<const char*>(fetch + i), _MM_HINT_T2);
      const __m512 e = _mm512_maskz_mov_ps(
          live, exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, in + i), offset)));
      if (out != nullptr) _mm512_mask_storeu_ps(out + i, live, e);
      block = _mm512_add_ps(block, e);
    }
    flush(block);
  }
  _mm512_storeu_pd(lanes, partial);
#else
  const __m256 offset = _mm256_set1_ps(shift), floor = _mm256_set1_ps(kFastExpFloor);
  const __m256 zero_below = _mm256_set1_ps(kExpZero);
  __m256d low = _mm256_setzero_pd(), high = _mm256_setzero_pd();
  // Float lane j sums elements j, j + 8, ... of up to kBlock vectors, then goes into double lane
  // j (as the AVX-512 form's blocks): two conversions and two double adds per vector were a
  // quarter of a row's softmax on a Zen 3 core.
  constexpr std::int64_t kBlock = 16 * kFloatLanes;
  for (std::int64_t start = 0; start + kFloatLanes <= n; start += kBlock) {
    __m256 block = _mm256_setzero_ps();
    for (i = start; i + kFloatLanes <= std::min(n, start + kBlock); i += kFloatLanes) {
      // One line of the next row per two vectors (8 floats a vector).
      if (fetch != nullptr && i % 16 == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(fetch + i), _MM_HINT_T0);
      }
      const __m256 a = _mm256_sub_ps(load(in + i), offset);
      const __m256 below = _mm256_cmp_ps(a, floor, _CMP_LT_OQ);  // false for NaN
      const __m256 zero = _mm256_cmp_ps(a, zero_below, _CMP_LT_OQ);
      // max(floor, a) is a where a is NaN (the second operand), so NaN stays NaN.
      __m256 e = _mm256_andnot_ps(zero, exp_normal_nonpositive(_mm256_max_ps(floor, a)));
      if (const int middle = _mm256_movemask_ps(_mm256_andnot_ps(zero, below)); middle != 0) {
        alignas(32) float arguments[8], values[8];
        _mm256_store_ps(arguments, a);
        _mm256_store_ps(values, e);
        redo_subnormal_lanes(arguments, values, static_cast<unsigned>(middle), 8);
        e = _mm256_load_ps(values);
      }
      if (out != nullptr) store(out + i, e);
      block = _mm256_add_ps(block, e);
    }
    low = _mm256_add_pd(low, _mm256_cvtps_pd(_mm256_castps256_ps128(block)));
    high = _mm256_add_pd(high, _mm256_cvtps_pd(_mm256_extractf128_ps(block, 1)));
  }
  _mm256_storeu_pd(lanes, low);
  _mm256_storeu_pd(lanes + 4, high);
#endif
  for (; i < n; ++i) {
    const float e = std::exp(in[i] - shift);
    if (out != nullptr) out[i] = e;
    lanes[i % 8] += static_cast<double>(e);
  }
  sum = 0;
  for (double lane : lanes) sum += lane;
  return true;
}

#else

bool vector_exp_sum(const float*, float, float*, std::int64_t, double&) noexcept { return false; }
bool vector_map(VectorFunction, const float*, float*, std::int64_t) noexcept { return false; }
bool vector_map(VectorFunction, const double*, double*, std::int64_t) noexcept { return false; }

#endif

}  // namespace kiln::cpu
