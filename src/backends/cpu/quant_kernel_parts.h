// What the quantized products' kernels for AVX-512 VNNI (quant_kernels.cpp) and for AVX2
// (quant_kernels_avx2.cpp) share: the layout of x encoded as int8 blocks, the weights' block
// layouts and scale fields as their kernels read them, and the tables that turn one kernel body
// into kernels for one and for four rows of x. Private to those two files and quant_matvec.cpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backends/cpu/quant_kernels.h"

namespace kiln::cpu::quant_parts {

using Kind = QuantScheme::Kind;
inline constexpr int kBlock = kQuantBlock;

// A row of x encoded for the int8 kernels, in groups of 8 blocks (the last padded with zero
// blocks): the 8 blocks' int8 codes round(x / d), d = max |x| / 127 (halves away from zero, as
// kiln's int8 blocks), 256 bytes in value order; their 8 f32 scales d; then the 8 int32 sums of
// each block's codes. VNNI (and AVX2's maddubs) multiplies an unsigned byte with a signed one, so
// the kernels take the weight's codes plus an offset (Q4_0's nibbles as they are, its codes plus
// 8) and take offset * (the sum of x's codes) back out.
inline constexpr int kGroupBlocks = 8;
inline constexpr std::int64_t kGroupBytes = kGroupBlocks * (kBlock + 4 + 4);
inline constexpr std::int64_t kGroupScales = kGroupBlocks * kBlock;
inline constexpr std::int64_t kGroupSums = kGroupScales + 4 * kGroupBlocks;
// Where block j's scale and sum sit among the group's eight: blocks 0, 2, 4, 6, 1, 3, 5, 7, the
// order in which the VNNI kernels' sums come out of their 512-bit registers (two blocks each).
constexpr int lane_of(std::int64_t j) { return static_cast<int>(j % 2 * 4 + j / 2); }

template <Kind kKind>
inline constexpr std::int64_t kBlockBytes = kKind == Kind::Q8_0 ? 34 : 18;

// The blocks of 32 values with an f16 d first: their bytes, where their fifth bits and min are
// (-1: none), the offset of their codes (value = d * (q - offset) + m), and whether the codes
// are signed bytes (Q8_0's, at 2) rather than nibbles (the block's last 16 bytes).
struct LegacyLayout {
  std::int64_t bytes, high, min;
  int offset;
  bool signed_codes = false;
  constexpr std::int64_t nibbles() const { return bytes - 16; }
};
constexpr LegacyLayout legacy_layout(Kind kind) {
  return kind == Kind::Q8_0   ? LegacyLayout{34, -1, -1, 0, true}
         : kind == Kind::Q4_0 ? LegacyLayout{18, -1, -1, 8}
         : kind == Kind::Q4_1 ? LegacyLayout{20, -1, 2, 0}
         : kind == Kind::Q5_0 ? LegacyLayout{22, 2, -1, 16}
                              : LegacyLayout{24, 4, 2, 0};
}

// Q4_K's and Q5_K's blocks of 256 values: bytes, and where the nibbles start (Q5_K's 32 bytes of
// fifth bits sit at 16, before them).
template <bool kFifth>
inline constexpr std::int64_t kQ45KBytes = kFifth ? 176 : 144;
template <bool kFifth>
inline constexpr std::int64_t kQ45KNibbles = kFifth ? 48 : 16;

// Bytes of the blocks of 256 values whose scales cover 16 values, and where their f16 d sits.
inline constexpr std::int64_t kQ6KBytes = 210, kQ6KD = 208;
inline constexpr std::int64_t kQ3KBytes = 110, kQ3KD = 108;
inline constexpr std::int64_t kQ2KBytes = 84, kQ2KD = 80;  // dmin at 82

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

// How far ahead of its reads a kernel asks for the weight's lines. The hardware's prefetchers
// alone kept two cores' product at 0.74-0.78 of a read-only stream's rate (quant_bench's
// quant_matvec_vs_memcpy, 8192 x 8192, of_read); 6 KiB ahead, 0.83-0.91. A prefetch past the
// weight's end is harmless (it never faults).
inline constexpr std::int64_t kPrefetchAhead = 6144;

// Asks for the lines of the `bytes` bytes kPrefetchAhead past row.
inline void prefetch_ahead(const std::byte* row, std::int64_t bytes) {
  for (std::int64_t line = 0; line < bytes; line += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(row) + kPrefetchAhead + line, _MM_HINT_T0);
  }
}

// The f16 fields at `at` of a group's eight blocks of `bytes` as floats, in lane_of's order.
__attribute__((target("avx2,f16c"))) inline __m256 group_halves(const std::byte* row,
                                                                std::int64_t bytes,
                                                                std::int64_t at) {
  std::uint64_t low = 0, high = 0;
  for (int j = 0; j < 4; ++j) {
    low |= std::uint64_t{scale_bits(row + 2 * j * bytes + at)} << (16 * j);
    high |= std::uint64_t{scale_bits(row + (2 * j + 1) * bytes + at)} << (16 * j);
  }
  return _mm256_cvtph_ps(_mm_set_epi64x(static_cast<long long>(high), static_cast<long long>(low)));
}

// A Q4_K block's eight sub-block scales d * scale_j and mins dmin * min_j, in lane_of's order,
// from its twelve bytes of 6-bit fields (quant::scale_min), all eight at once: one byte permute
// picks each field's low bits (sub-blocks 0-3: the 6 low bits of bytes j and j + 4; 4-7: a
// nibble of byte j + 4), another its top two bits (4-7: bits 6-7 of bytes j - 4 and j).
__attribute__((target("avx2,f16c"))) inline void q4_k_scales(const std::byte* block, __m256& scales,
                                                             __m256& mins) {
  struct Tables {
    std::array<std::uint8_t, 16> low, high, keep, keep_shifted, keep_top;
  };
  alignas(16) static constexpr Tables kTables = [] {
    Tables t{};
    for (int p = 0; p < 16; ++p) {
      const bool is_min = p >= 8;
      const int lane = p % 8;
      const int j = lane < 4 ? 2 * lane : 2 * (lane - 4) + 1;  // the sub-block at that lane
      const auto at = static_cast<std::size_t>(p);
      t.low[at] = static_cast<std::uint8_t>(!is_min && j < 4 ? j : j + 4);
      t.high[at] = j < 4 ? 0x80 : static_cast<std::uint8_t>(is_min ? j : j - 4);
      t.keep[at] = j < 4 ? 63 : is_min ? 0 : 15;
      t.keep_shifted[at] = j >= 4 && is_min ? 15 : 0;
      t.keep_top[at] = j < 4 ? 0 : 0x30;
    }
    return t;
  }();
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 4));
  const __m128i low = _mm_shuffle_epi8(
      packed, _mm_load_si128(reinterpret_cast<const __m128i*>(kTables.low.data())));
  const __m128i high = _mm_shuffle_epi8(
      packed, _mm_load_si128(reinterpret_cast<const __m128i*>(kTables.high.data())));
  const __m128i fields = _mm_or_si128(
      _mm_or_si128(
          _mm_and_si128(low, _mm_load_si128(reinterpret_cast<const __m128i*>(kTables.keep.data()))),
          _mm_and_si128(_mm_srli_epi16(low, 4), _mm_load_si128(reinterpret_cast<const __m128i*>(
                                                    kTables.keep_shifted.data())))),
      _mm_and_si128(_mm_srli_epi16(high, 2),
                    _mm_load_si128(reinterpret_cast<const __m128i*>(kTables.keep_top.data()))));
  scales = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(scale_bits(block))),
                         _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(fields)));
  mins = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(scale_bits(block + 2))),
                       _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(fields, 8))));
}

// The 16 int8 scales (each of 16 values) of a Q6_K, Q3_K or Q2_K block, and Q2_K's 16 mins.
//   Q6_K: 16 int8 scales at 192.
//   Q3_K: scale j is the low nibble of byte 96 + j (j < 8) or its high nibble (j >= 8), with
//     bit pair j / 4 of byte 104 + j % 4 on top, less 32.
//   Q2_K: the low nibbles of bytes 0-15; the mins their high nibbles.
__attribute__((target("avx2"))) inline __m128i q6_k_scales(const std::byte* row) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 192));
}
__attribute__((target("avx2"))) inline __m128i q3_k_scales(const std::byte* row) {
  std::uint64_t nibbles;
  std::uint32_t pairs;
  std::memcpy(&nibbles, row + 96, 8);
  std::memcpy(&pairs, row + 104, 4);
  const __m128i low = _mm_and_si128(
      _mm_set_epi64x(static_cast<long long>(nibbles >> 4), static_cast<long long>(nibbles)),
      _mm_set1_epi8(0x0f));
  const __m128i high = _mm_and_si128(
      _mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(pairs)), _mm_set_epi32(6, 4, 2, 0)),
      _mm_set1_epi8(0x03));
  return _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
}
__attribute__((target("avx2"))) inline __m128i q2_k_scales(const std::byte* row) {
  return _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row)), _mm_set1_epi8(0x0f));
}
__attribute__((target("avx2"))) inline __m128i q2_k_mins(const std::byte* row) {
  return _mm_and_si128(_mm_srli_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row)), 4),
                       _mm_set1_epi8(0x0f));
}

// acc plus x's eight block scales (at xg) times the eight block sums of a block whose scales
// cover 16 values (Q2_K, Q3_K, Q6_K; in lane_of's order, its scales applied): d times the
// sums, less Q2_K's dmin times its mins' sums (min_sums; ignored without has_min). d and dmin
// are the block's f16 fields at d_at and d_at + 2.
__attribute__((target("avx2,f16c,fma"))) inline __m256 add_sixteens_block(
    __m256 acc, __m256i sums, __m256i min_sums, bool has_min, const std::byte* row,
    std::int64_t d_at, const std::byte* xg) {
  __m256 block =
      _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(scale_bits(row + d_at))), _mm256_cvtepi32_ps(sums));
  if (has_min) {
    const __m256 dmin = _mm256_set1_ps(_cvtsh_ss(scale_bits(row + d_at + 2)));
    block = _mm256_fnmadd_ps(dmin, _mm256_cvtepi32_ps(min_sums), block);
  }
  const __m256 dx = _mm256_loadu_ps(reinterpret_cast<const float*>(xg + kGroupScales));
  return _mm256_fmadd_ps(dx, block, acc);
}

// The AVX2 kernels on int8 x of every GGUF kind of weights but Q8_K (quant_kernels_avx2.cpp),
// and their encoding of x, the same bytes as the AVX-512 encoder's.
QuantKernels avx2_int8_kernels(Kind kind) noexcept;
void encode_row_avx2(const float* x, std::int64_t blocks, std::byte* out) noexcept;

#endif

// A kernel (one body for any count of x's rows up to kQuantGroup, compiled once) as the table's
// kernels for four rows and for one.
using CountedKernel = void (*)(const std::byte*, const std::byte* const*, std::int64_t, float*,
                               int);
template <CountedKernel kKernel>
void rows_of_group(const std::byte* row, const std::byte* const* xs, std::int64_t blocks,
                   float* out) {
  kKernel(row, xs, blocks, out, kQuantGroup);
}
template <CountedKernel kKernel>
void rows_of_one(const std::byte* row, const std::byte* const* xs, std::int64_t blocks,
                 float* out) {
  kKernel(row, xs, blocks, out, 1);
}
// The table of a kernel on x encoded as int8 blocks.
template <CountedKernel kKernel>
constexpr QuantKernels encoded_kernels() {
  return {rows_of_group<kKernel>, rows_of_one<kKernel>, true};
}

}  // namespace kiln::cpu::quant_parts
