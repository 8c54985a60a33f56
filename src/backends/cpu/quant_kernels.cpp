// The quantized products' SIMD kernels (quant_kernels.h). Each widens a block's codes in
// registers and multiplies them with one or four rows of x.
#include "backends/cpu/quant_kernels.h"

#include <cmath>
#include <cstring>

#include "quant/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln::cpu {
namespace {

using Kind = QuantScheme::Kind;
constexpr int kBlock = kQuantBlock;

// A row of x encoded for the Q4_0 VNNI kernel (encode_row_q4_0), 128 bytes per pair of blocks:
// the pair's codes in the order its weight codes take in a 512-bit register when their nibbles
// are unpacked two blocks at a time, [block 0's first 16 | block 1's first 16 | block 0's last 16
// | block 1's last 16], then 16 f32 scales, one per int32 lane of the product (the lanes summing
// a block's codes hold its scale: lanes 0-3 and 8-11 block 0's, 4-7 and 12-15 block 1's). An odd
// last block keeps its codes in value order.
constexpr int lane_block(int lane) { return (lane / 4) % 2; }
constexpr int code_position(int block, int value) {  // within the pair's 64 bytes
  return 16 * block + (value < 16 ? value : 16 + value);
}

constexpr std::int64_t kPairBytes = 128;

void encode_row_q4_0(const float* x, std::int64_t blocks, std::byte* out) noexcept {
  for (std::int64_t b = 0; b < blocks; ++b, x += kBlock) {
    float amax = 0.0f;
    for (int j = 0; j < kBlock; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const std::int64_t pair = b / 2;
    const bool tail = pair * 2 + 1 == blocks;  // the odd last block: value order
    const int in_pair = static_cast<int>(b % 2);
    auto* codes = reinterpret_cast<std::int8_t*>(out + pair * kPairBytes);
    auto* scales = reinterpret_cast<float*>(out + pair * kPairBytes + 64);
    for (int j = 0; j < kBlock; ++j) {
      const float q = d != 0.0f ? std::round(x[j] / d) : 0.0f;
      const int at = tail ? j : code_position(in_pair, j);
      codes[at] = static_cast<std::int8_t>(std::fmax(-127.0f, std::fmin(127.0f, q)));
    }
    for (int lane = 0; lane < 16; ++lane) {
      if (tail || lane_block(lane) == in_pair) scales[lane] = d;
    }
  }
}

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

// The maskz forms of the AVX-512 intrinsics below, with every lane set: GCC 12's plain forms
// (and the casts built on them) warn of their undefined inputs.
constexpr __mmask8 kAll64 = 0xff;
constexpr __mmask16 kAll32 = 0xffff;

// [low | high] as one 512-bit register.
__attribute__((target("avx512f"))) inline __m512i halves(__m256i low, __m256i high) {
  return _mm512_maskz_inserti64x4(
      kAll64, _mm512_maskz_inserti64x4(kAll64, _mm512_setzero_si512(), low, 0), high, 1);
}

// Two Q4_0 blocks' 64 codes minus 8, in the pair order of encode_row_q4_0.
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512i pair_codes(
    const std::byte* b0) {
  const __m256i raw = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + 20)),
                                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + 2)));
  const __m256i mask = _mm256_set1_epi8(0x0f);
  const __m512i nibbles =
      halves(_mm256_and_si256(raw, mask), _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask));
  return _mm512_sub_epi8(nibbles, _mm512_set1_epi8(8));
}

// AVX-512 with VNNI, Q4_0: a pair of blocks' dot product with x's int8 codes is one
// multiply-add instruction (|w| times x with w's sign, summed in int32 lanes), each lane then
// scaled by its block's two scales; the nibbles of two blocks unpack together. (Widening every
// code to float instead is compute-bound: a third of the copy bandwidth on a Zen 4 core.)
template <int kCount>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma"))) void dots_vnni_q4_0(
    const std::byte* row, const std::byte* const* xs, std::int64_t blocks, float* out) {
  constexpr Kind kKind = Kind::Q4_0;
  alignas(64) static constexpr int kLanes[16] = {
      lane_block(0),  lane_block(1),  lane_block(2),  lane_block(3), lane_block(4),  lane_block(5),
      lane_block(6),  lane_block(7),  lane_block(8),  lane_block(9), lane_block(10), lane_block(11),
      lane_block(12), lane_block(13), lane_block(14), lane_block(15)};
  const __m512i lanes = _mm512_load_si512(kLanes);
  const std::int64_t pairs = blocks / 2;
  __m512 acc[kCount];
  for (int i = 0; i < kCount; ++i) acc[i] = _mm512_setzero_ps();
  for (std::int64_t p = 0; p < pairs; ++p, row += 2 * kBlockBytes<kKind>) {
    const __m512i w = pair_codes(row);
    const __m512i magnitude = _mm512_abs_epi8(w);
    const __mmask64 negative = _mm512_movepi8_mask(w);
    const int bits = scale_bits(row) | (scale_bits(row + kBlockBytes<kKind>) << 16);
    const __m512 dw = _mm512_maskz_permutexvar_ps(
        kAll32, lanes,
        _mm512_maskz_insertf32x4(kAll32, _mm512_setzero_ps(), _mm_cvtph_ps(_mm_cvtsi32_si128(bits)),
                                 0));
    for (int i = 0; i < kCount; ++i) {
      const __m512i x = _mm512_loadu_si512(xs[i] + p * kPairBytes);
      const __m512i dot =
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), magnitude,
                              _mm512_mask_sub_epi8(x, negative, _mm512_setzero_si512(), x));
      const __m512 dx = _mm512_loadu_ps(xs[i] + p * kPairBytes + 64);
      acc[i] =
          _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(kAll32, dot), _mm512_mul_ps(dw, dx), acc[i]);
    }
  }
  for (int i = 0; i < kCount; ++i) {
    const __m512d sums = _mm512_castps_pd(acc[i]);
    float sum =
        horizontal_sum(_mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, sums, 0)),
                                     _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, sums, 1))));
    if (blocks % 2 != 0) {  // the odd last block, its codes in value order
      const __m256i w = block_codes<kKind>(row);
      const __m256i x =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs[i] + pairs * kPairBytes));
      const __m256i dot =
          _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
      float dx;
      std::memcpy(&dx, xs[i] + pairs * kPairBytes + 64, 4);
      sum += _cvtsh_ss(scale_bits(row)) * dx * horizontal_sum(_mm256_cvtepi32_ps(dot));
    }
    out[i] = sum;
  }
}

// AVX-512 with VNNI, Q8_0: one block at a time in 256-bit registers, x as kiln's int8 blocks (an
// f32 scale, then 32 codes). Its blocks need no unpacking; a pair kernel like Q4_0's, measured on
// one Zen 5 core, was 1.37x faster on a weight in cache (4096^2) but 15 % slower on one streamed
// from memory (8192^2), the case a decoder step is.
template <int kCount>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma"))) void dots_vnni_q8_0(
    const std::byte* row, const std::byte* const* xs, std::int64_t blocks, float* out) {
  __m256 acc[kCount];
  for (int i = 0; i < kCount; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b, row += kBlockBytes<Kind::Q8_0>) {
    const __m256i w = block_codes<Kind::Q8_0>(row);
    const __m256i magnitude = _mm256_abs_epi8(w);
    const float dw = _cvtsh_ss(scale_bits(row));
    for (int i = 0; i < kCount; ++i) {
      const std::byte* xb = xs[i] + b * (4 + kBlock);
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

// d times the low 8 int8 codes of part, as floats. (A function, not a lambda: clang gives a
// lambda none of its enclosing function's target attributes.)
__attribute__((target("avx2"))) inline __m256 scaled_codes(__m256 d, __m128i part) {
  return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part)));
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
    const __m256 w[4] = {scaled_codes(d, low), scaled_codes(d, _mm_srli_si128(low, 8)),
                         scaled_codes(d, high), scaled_codes(d, _mm_srli_si128(high, 8))};
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
  if (isa == QuantIsa::Avx512 && kKind == Kind::Q8_0) {
    return {dots_vnni_q8_0<kQuantGroup>, dots_vnni_q8_0<1>, true};
  }
  if (isa == QuantIsa::Avx512) {
    return {dots_vnni_q4_0<kQuantGroup>, dots_vnni_q4_0<1>, true};
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

std::int64_t encoded_row_bytes(QuantScheme::Kind kind, std::int64_t blocks) noexcept {
  if (kind == Kind::Q8_0) return blocks * (4 + kBlock);
  return (blocks + 1) / 2 * kPairBytes;
}

void encode_row(QuantScheme::Kind kind, const float* x, std::int64_t blocks,
                std::byte* out) noexcept {
  if (kind == Kind::Q8_0) return quant::quantize_int8(x, blocks, kBlock, out);
  encode_row_q4_0(x, blocks, out);
}

}  // namespace kiln::cpu
