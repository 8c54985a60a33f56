// The quantized products' SIMD kernels (quant_kernels.h). Each widens a block's codes in
// registers and multiplies them with one or four rows of x.
#include "backends/cpu/quant_kernels.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln::cpu {
namespace {

using Kind = QuantScheme::Kind;
constexpr int kBlock = kQuantBlock;

#if defined(__x86_64__) && defined(__GNUC__)

inline std::uint16_t scale_bits(const std::byte* block) {
  std::uint16_t bits;
  std::memcpy(&bits, block, 2);
  return bits;
}

__attribute__((target("avx2"))) inline float horizontal_sum(__m256 v) {
  const __m128 sum4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 sum2 = _mm_add_ps(sum4, _mm_movehl_ps(sum4, sum4));
  return _mm_cvtss_f32(_mm_add_ss(sum2, _mm_movehdup_ps(sum2)));
}

// Q4_0's 16 bytes of nibbles as the 32 codes minus 8, int8 in value order.
__attribute__((target("avx2"))) inline void q4_codes(const std::byte* qs, __m128i& low,
                                                     __m128i& high) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i eight = _mm_set1_epi8(8);
  low = _mm_sub_epi8(_mm_and_si128(raw, mask), eight);
  high = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), mask), eight);
}

// A block's 32 codes, int8 in value order.
template <Kind kKind>
__attribute__((target("avx2"))) inline __m256i block_codes(const std::byte* block) {
  if constexpr (kKind == Kind::Q8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
  } else {
    __m128i low;
    __m128i high;
    q4_codes(block + 2, low, high);
    return _mm256_set_m128i(high, low);
  }
}

template <Kind kKind>
constexpr std::int64_t kBlockBytes = kKind == Kind::Q8_0 ? 34 : 18;

// AVX-512 with VNNI: each block's dot product with an int8 block of x is one multiply-add
// instruction (|w| times x with w's sign, summed in int32), scaled by both blocks' scales. This
// reads the weight at memory speed, where widening every code to float is compute-bound (a
// third of the copy bandwidth on a Zen 4 core).
template <Kind kKind, int kCount>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma"))) void dots_vnni(
    const std::byte* row, const std::byte* const* xs, std::int64_t blocks, float* out) {
  __m256 acc[kCount];
  for (int i = 0; i < kCount; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b, row += kBlockBytes<kKind>) {
    const __m256i w = block_codes<kKind>(row);
    const __m256i magnitude = _mm256_abs_epi8(w);
    const float dw = _cvtsh_ss(scale_bits(row));
    for (int i = 0; i < kCount; ++i) {
      const std::byte* xb = xs[i] + b * kEncodedBlock;
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 4));
      const __m256i dot =
          _mm256_dpbusd_epi32(_mm256_setzero_si256(), magnitude, _mm256_sign_epi8(x, w));
      float dx;
      std::memcpy(&dx, xb, 4);
      acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx), _mm256_cvtepi32_ps(dot), acc[i]);
    }
  }
  for (int i = 0; i < kCount; ++i) out[i] = horizontal_sum(acc[i]);
}

// AVX2: each block's codes widened to float once and scaled, then multiplied with each row of x.
template <Kind kKind, int kCount>
__attribute__((target("avx2,f16c,fma"))) void dots_avx2(const std::byte* row,
                                                        const std::byte* const* xs,
                                                        std::int64_t blocks, float* out) {
  __m256 acc[kCount];
  for (int i = 0; i < kCount; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b, row += kBlockBytes<kKind>) {
    const __m256i codes = block_codes<kKind>(row);
    const __m128i low = _mm256_castsi256_si128(codes);
    const __m128i high = _mm256_extracti128_si256(codes, 1);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(scale_bits(row)));
    auto widen = [&](__m128i part) {
      return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part)));
    };
    const __m256 w[4] = {widen(low), widen(_mm_srli_si128(low, 8)), widen(high),
                         widen(_mm_srli_si128(high, 8))};
    for (int i = 0; i < kCount; ++i) {
      const float* x = reinterpret_cast<const float*>(xs[i]) + b * kBlock;
      __m256 sum = acc[i];
      for (int k = 0; k < 4; ++k) sum = _mm256_fmadd_ps(w[k], _mm256_loadu_ps(x + 8 * k), sum);
      acc[i] = sum;
    }
  }
  for (int i = 0; i < kCount; ++i) out[i] = horizontal_sum(acc[i]);
}

#endif

template <Kind kKind>
QuantKernels kernels_for([[maybe_unused]] QuantIsa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == QuantIsa::Avx512) {
    return {dots_vnni<kKind, kQuantGroup>, dots_vnni<kKind, 1>, true};
  }
  return {dots_avx2<kKind, kQuantGroup>, dots_avx2<kKind, 1>, false};
#else
  return {};
#endif
}

}  // namespace

QuantKernels quant_kernels(QuantScheme::Kind kind, QuantIsa isa) noexcept {
  return kind == Kind::Q8_0 ? kernels_for<Kind::Q8_0>(isa) : kernels_for<Kind::Q4_0>(isa);
}

}  // namespace kiln::cpu
