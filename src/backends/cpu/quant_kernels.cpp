// The quantized products' SIMD kernels (quant_kernels.h). Each widens a block's codes in
// registers and multiplies them with one or four rows of x.
#include "backends/cpu/quant_kernels.h"

#include <array>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() and so warn "may be used
// uninitialized" wherever they are inlined (GCC bug 105593, fixed in GCC 13); the warning is
// about the header, not this code. The state set here covers the header's lines.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

// After the pragma above: it includes <immintrin.h> too.
#include "backends/cpu/quant_kernel_parts.h"

namespace kiln::cpu {
namespace {

using namespace quant_parts;

#if defined(__x86_64__) && defined(__GNUC__)

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

// The encoding above, 32 values at a time: d and each code as kiln's int8 blocks have them
// (quant::quantize_int8: the same division, rounding halves away from zero). Only the VNNI
// kernels read it, so it may use their instructions.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void encode_row_int8(
    const float* x, std::int64_t blocks, std::byte* out) noexcept {
  const std::int64_t groups = (blocks + kGroupBlocks - 1) / kGroupBlocks;
  std::memset(out, 0, static_cast<std::size_t>(groups * kGroupBytes));
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  const __m512 high = _mm512_set1_ps(127.0f), low = _mm512_set1_ps(-127.0f);
  for (std::int64_t b = 0; b < blocks; ++b, x += kBlock) {
    std::byte* group = out + b / kGroupBlocks * kGroupBytes;
    const std::int64_t j = b % kGroupBlocks;
    const __m512 v[2] = {_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16)};
    const float amax =
        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
    const float d = amax / 127.0f;
    std::int32_t sum = 0;
    if (d != 0.0f) {
      const __m512 dv = _mm512_set1_ps(d);
      for (int h = 0; h < 2; ++h) {
        const __m512 q = _mm512_div_ps(v[h], dv);
        // round(q): truncate, then one step away from zero where the dropped part (exact) is at
        // least a half.
        const __m512 t = _mm512_roundscale_ps(q, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        const __mmask16 up =
            _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(q, t)), half, _CMP_GE_OQ);
        const __m512 away = _mm512_or_ps(one, _mm512_and_ps(q, _mm512_set1_ps(-0.0f)));
        const __m512 r =
            _mm512_min_ps(high, _mm512_max_ps(low, _mm512_mask_add_ps(t, up, t, away)));
        const __m512i codes = _mm512_cvttps_epi32(r);
        sum += _mm512_reduce_add_epi32(codes);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(group + j * kBlock + 16 * h),
                         _mm512_cvtepi32_epi8(codes));
      }
    }
    std::memcpy(group + kGroupScales + 4 * lane_of(j), &d, 4);
    std::memcpy(group + kGroupSums + 4 * lane_of(j), &sum, 4);
  }
}

// Bit matrices of GF(2) affine transforms of bytes (gf2p8affine, one per 64-bit lane; byte 7 - i
// says which input bits make output bit i): a byte's low nibble, and its high nibble shifted down.
constexpr long long kLowNibble = 0x0102040800000000;
constexpr long long kHighNibble = 0x1020408000000000;

// log2 of the offset the VNNI kernels add to a weight's codes: 128 or 8.
template <Kind kKind>
constexpr int kCodeShift = kKind == Kind::Q8_0 ? 7 : 3;

// A block's 32 codes plus that offset, unsigned bytes in value order.
template <Kind kKind>
__attribute__((target("avx2"))) inline __m256i offset_codes(const std::byte* block) {
  if constexpr (kKind == Kind::Q8_0) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2)),
                            _mm256_set1_epi8(static_cast<char>(0x80)));
  } else {
    // The 16 bytes twice; the upper copy shifted down a nibble: the low nibbles are values 0-15,
    // the high ones 16-31.
    const __m256i twice =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2)));
    return _mm256_and_si256(_mm256_srlv_epi32(twice, _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0)),
                            _mm256_set1_epi8(0x0f));
  }
}

// The codes plus offset of a group's eight blocks, two blocks a register ([first block | second]
// in value order), and the blocks' f16 scales as floats in lane_of's order.
template <Kind kKind>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,gfni,f16c"))) inline __m256 group_codes(
    const std::byte* row, __m512i w[kGroupBlocks / 2]) {
  constexpr std::int64_t kBytes = kBlockBytes<kKind>;
  if constexpr (kKind == Kind::Q8_0) {
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int m = 0; m < kGroupBlocks / 2; ++m) {
      const std::byte* first = row + 2 * m * kBytes + 2;
      w[m] = _mm512_xor_si512(
          _mm512_inserti64x4(
              _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(first))),
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(first + kBytes)), 1),
          flip);
    }
    // The scales gathered in integer registers, which the vector units do not wait for.
    std::uint64_t low = 0, high = 0;
    for (int j = 0; j < 4; ++j) {
      low |= std::uint64_t{scale_bits(row + 2 * j * kBytes)} << (16 * j);
      high |= std::uint64_t{scale_bits(row + (2 * j + 1) * kBytes)} << (16 * j);
    }
    return _mm256_cvtph_ps(
        _mm_set_epi64x(static_cast<long long>(high), static_cast<long long>(low)));
  } else {
    // The group's 144 bytes as three loads (bytes 0-63, 64-127 and 80-143: none past its end),
    // whose bytes permutes place: each pair's 16 bytes of nibbles twice per block, the second
    // copy then shifted down a nibble (values 0-15 are the low nibbles, 16-31 the high ones).
    const __m512i a = _mm512_loadu_si512(row);
    const __m512i b = _mm512_loadu_si512(row + 64);
    const __m512i c = _mm512_loadu_si512(row + 80);
    alignas(64) static constexpr auto kPairIndex = [] {
      std::array<std::array<std::uint8_t, 64>, 4> index{};
      for (int m = 0; m < 4; ++m) {
        for (int o = 0; o < 64; ++o) {
          // The byte's offset in the group, then as an index into the two registers permuted:
          // (a, b) for pairs 0 and 1, b alone for pair 2, (b, c) for pair 3.
          const int at = (2 * m + o / 32) * static_cast<int>(kBytes) + 2 + o % 16;
          const int base = m == 0 || m == 1 ? 0 : 64;
          const int second = m == 3 ? 80 : 64;  // where the second register starts
          index[static_cast<std::size_t>(m)][static_cast<std::size_t>(o)] =
              static_cast<std::uint8_t>(at - base < 64 ? at - base : 64 + at - second);
        }
      }
      return index;
    }();
    alignas(64) static constexpr auto kScaleIndex = [] {
      std::array<std::uint8_t, 64> index{};
      for (int j = 0; j < kGroupBlocks; ++j) {
        for (int half = 0; half < 2; ++half) {
          index[static_cast<std::size_t>(2 * lane_of(j) + half)] =
              static_cast<std::uint8_t>(j * kBytes + half);
        }
      }
      return index;
    }();
    __m512i index[4];
    for (int m = 0; m < 4; ++m) {
      index[m] = _mm512_load_si512(kPairIndex[static_cast<std::size_t>(m)].data());
    }
    const __m512i pairs[4] = {
        _mm512_permutex2var_epi8(a, index[0], b), _mm512_permutex2var_epi8(a, index[1], b),
        _mm512_permutexvar_epi8(index[2], b), _mm512_permutex2var_epi8(b, index[3], c)};
    // The low nibble of each block's first copy, the high one (shifted down) of its second.
    const __m512i nibbles = _mm512_set_epi64(kHighNibble, kHighNibble, kLowNibble, kLowNibble,
                                             kHighNibble, kHighNibble, kLowNibble, kLowNibble);
    for (int m = 0; m < 4; ++m) w[m] = _mm512_gf2p8affine_epi64_epi8(pairs[m], nibbles, 0);
    const __m512i scales = _mm512_permutex2var_epi8(a, _mm512_load_si512(kScaleIndex.data()), b);
    return _mm256_cvtph_ps(_mm512_castsi512_si128(scales));
  }
}

// Four registers of int32 lanes, two blocks each, as one register of the eight blocks' sums in
// lane_of's order.
__attribute__((target("avx512f,avx512vl"))) inline __m256i block_sums(const __m512i d[4]) {
  const __m512i e0 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(d[0], d[1]), _mm512_unpackhi_epi32(d[0], d[1]));
  const __m512i e1 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(d[2], d[3]), _mm512_unpackhi_epi32(d[2], d[3]));
  // Each 128-bit lane: the sums of its lanes of d[0], d[1], d[2], d[3]; lanes 0 and 1 hold
  // blocks 0, 2, 4, 6, lanes 2 and 3 blocks 1, 3, 5, 7.
  const __m512i f = _mm512_add_epi32(_mm512_unpacklo_epi64(e0, e1), _mm512_unpackhi_epi64(e0, e1));
  const __m512i g = _mm512_shuffle_i64x2(f, f, _MM_SHUFFLE(3, 1, 2, 0));
  return _mm256_add_epi32(_mm512_castsi512_si256(g), _mm512_extracti64x4_epi64(g, 1));
}

// The eight blocks' dot products of a group's codes (two blocks a register, unsigned) with x's
// group xg, in lane_of's order.
__attribute__((target("avx512f,avx512vl,avx512vnni"))) inline __m256i group_dots(
    const __m512i w[kGroupBlocks / 2], const std::byte* xg) {
  __m512i dots[kGroupBlocks / 2];
  for (int m = 0; m < kGroupBlocks / 2; ++m) {
    dots[m] =
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[m], _mm512_loadu_si512(xg + m * 2 * kBlock));
  }
  return block_sums(dots);
}

// A Q4_1, Q5_0 or Q5_1 block's 32 codes (nibbles, and Q5's fifth bits by a masked move of their
// mask), unsigned bytes in value order.
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m256i legacy_codes(
    const LegacyLayout& l, const std::byte* block) {
  const __m256i twice = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + l.nibbles())));
  const __m256i codes = _mm256_and_si256(
      _mm256_srlv_epi32(twice, _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0)), _mm256_set1_epi8(0x0f));
  std::uint32_t high = 0;
  if (l.high >= 0) std::memcpy(&high, block + l.high, 4);
  return _mm256_or_si256(codes, _mm256_maskz_set1_epi8(high, 0x10));
}

// The dot product of a row's blocks [first, blocks) with one encoded row of x's, a block at a
// time (a last group of fewer than eight), Q8_0 or Q4_0: one function per kind, which its
// kernels for one and for four rows of x share.
template <Kind kKind>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c"), noinline)) float partial_group(
    const std::byte* row, const std::byte* x, std::int64_t first, std::int64_t blocks) {
  float sum = 0.0f;
  for (std::int64_t b = first; b < blocks; ++b) {
    const std::byte* block = row + (b - first) * kBlockBytes<kKind>;
    const EncodedBlock xb = encoded_block(x, b);
    const __m256i dot =
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), offset_codes<kKind>(block),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.codes)));
    alignas(32) std::int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), dot);
    std::int32_t total = -xb.sum * (1 << kCodeShift<kKind>);
    for (std::int32_t lane : lanes) total += lane;
    sum += xb.scale * _cvtsh_ss(scale_bits(block)) * static_cast<float>(total);
  }
  return sum;
}

// AVX-512 with VNNI, eight blocks at a time, two a register: each pair's codes plus offset times
// x's codes is one multiply-add, the eight blocks' int32 lanes are summed into one register of
// eight block sums, less the offsets' part, and only those eight are scaled in float. (Scaling
// each block's lanes as it came took twice the instructions: Q8_0 ran at the speed of one core,
// 59 % of the copy bandwidth on two, and Q4_0 at 46 %.)

template <Kind kKind>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,gfni,f16c,fma"),
               noinline)) void
dots_vnni(const std::byte* row, const std::byte* const* xs, std::int64_t blocks, float* out,
          int count) {
  constexpr std::int64_t kBytes = kBlockBytes<kKind>;
  const std::int64_t groups = blocks / kGroupBlocks;
  __m256 acc[kQuantGroup];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (std::int64_t g = 0; g < groups; ++g, row += kGroupBlocks * kBytes) {
    prefetch_ahead(row, kGroupBlocks * kBytes);
    __m512i w[kGroupBlocks / 2];
    const __m256 dw = group_codes<kKind>(row, w);
    for (int i = 0; i < kQuantGroup && i < count; ++i) {
      const std::byte* xg = xs[i] + g * kGroupBytes;
      const __m256i dots = group_dots(w, xg);
      const __m256i offsets = _mm256_slli_epi32(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xg + kGroupSums)), kCodeShift<kKind>);
      const __m256i sums = _mm256_sub_epi32(dots, offsets);
      const __m256 dx = _mm256_loadu_ps(reinterpret_cast<const float*>(xg + kGroupScales));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(dw, dx), acc[i]);
    }
  }
  for (int i = 0; i < kQuantGroup && i < count; ++i) {
    out[i] =
        horizontal_sum(acc[i]) + partial_group<kKind>(row, xs[i], groups * kGroupBlocks, blocks);
  }
}

// AVX-512 with VNNI, Q4_1, Q5_0 and Q5_1, a block at a time into registers of two: its 32
// nibbles (values 0-15 the low ones, 16-31 the high) and Q5's fifth bits (bit i of its 32-bit
// mask is value i's, a masked move) are VNNI's unsigned operand as they are. Q5_0's value is
// d * (q - 16): its offset comes off through x's code sums as Q4_0's does; Q4_1's and Q5_1's is
// d * q + m: the min adds m times x's code sum. (Their layouts and codes: LegacyLayout,
// legacy_codes above.)

// One body for the three kinds (noipa: GCC would otherwise clone it for each layout).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma"), noipa)) void
dots_vnni_legacy(const LegacyLayout& l, const std::byte* row, const std::byte* const* xs,
                 std::int64_t blocks, float* out, int count) {
  const std::int64_t groups = blocks / kGroupBlocks;
  const __m256i offset = _mm256_set1_epi32(l.offset);
  __m256 acc[kQuantGroup];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (std::int64_t g = 0; g < groups; ++g, row += kGroupBlocks * l.bytes) {
    prefetch_ahead(row, kGroupBlocks * l.bytes);
    __m512i w[kGroupBlocks / 2];
    for (int m = 0; m < kGroupBlocks / 2; ++m) {
      w[m] = _mm512_inserti64x4(_mm512_castsi256_si512(legacy_codes(l, row + 2 * m * l.bytes)),
                                legacy_codes(l, row + (2 * m + 1) * l.bytes), 1);
    }
    const __m256 dw = group_halves(row, l.bytes, 0);
    const __m256 mw = l.min >= 0 ? group_halves(row, l.bytes, l.min) : _mm256_setzero_ps();
    for (int i = 0; i < kQuantGroup && i < count; ++i) {
      const std::byte* xg = xs[i] + g * kGroupBytes;
      const __m256i code_sums =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xg + kGroupSums));
      const __m256i dots =
          _mm256_sub_epi32(group_dots(w, xg), _mm256_mullo_epi32(offset, code_sums));
      const __m256 block = _mm256_fmadd_ps(dw, _mm256_cvtepi32_ps(dots),
                                           _mm256_mul_ps(mw, _mm256_cvtepi32_ps(code_sums)));
      const __m256 dx = _mm256_loadu_ps(reinterpret_cast<const float*>(xg + kGroupScales));
      acc[i] = _mm256_fmadd_ps(dx, block, acc[i]);
    }
  }
  // The blocks of a last, partial group, one at a time.
  for (int i = 0; i < kQuantGroup && i < count; ++i) {
    float sum = horizontal_sum(acc[i]);
    for (std::int64_t b = groups * kGroupBlocks; b < blocks; ++b) {
      const std::byte* block = row + (b - groups * kGroupBlocks) * l.bytes;
      const EncodedBlock xb = encoded_block(xs[i], b);
      const __m256i dot =
          _mm256_dpbusd_epi32(_mm256_setzero_si256(), legacy_codes(l, block),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.codes)));
      alignas(32) std::int32_t lanes[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), dot);
      std::int32_t total = -l.offset * xb.sum;
      for (std::int32_t lane : lanes) total += lane;
      const float m = l.min >= 0 ? _cvtsh_ss(scale_bits(block + l.min)) : 0.0f;
      sum += xb.scale * (_cvtsh_ss(scale_bits(block)) * static_cast<float>(total) +
                         m * static_cast<float>(xb.sum));
    }
    out[i] = sum;
  }
}
// dots_vnni_legacy for kind, as a CountedKernel.
template <Kind kKind>
void legacy_kernel(const std::byte* row, const std::byte* const* xs, std::int64_t blocks,
                   float* out, int count) {
  static constexpr LegacyLayout kLayout = legacy_layout(kKind);
  dots_vnni_legacy(kLayout, row, xs, blocks, out, count);
}

// The shifts of 16-bit lanes that bring values 0-31 and 32-63 of register c's bit fields down:
// bit pairs (a broadcast of a half's 32 bytes) and single bits (of 32 bytes for all 256 values).
__attribute__((target("avx512f"))) inline __m512i pair_shifts(int c) {
  const long long low = 0x0001000100010001LL * (4 * (c % 2));
  const long long high = 0x0001000100010001LL * (4 * (c % 2) + 2);
  return _mm512_set_epi64(high, high, high, high, low, low, low, low);
}
__attribute__((target("avx512f"))) inline __m512i bit_shifts(int c) {
  const long long low = 0x0001000100010001LL * (2 * c);
  const long long high = 0x0001000100010001LL * (2 * c + 1);
  return _mm512_set_epi64(high, high, high, high, low, low, low, low);
}
// 32 bytes at `at`, in both halves of a register.
__attribute__((target("avx512f"))) inline __m512i twice(const std::byte* at) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)));
}
// AVX-512 with VNNI, Q4_K and Q5_K: a block of 256 values is a group of x's eight blocks of 32,
// and its eight sub-blocks are those blocks. Each sub-block's value is d * scale_j * q - dmin *
// min_j, q its nibble (0-15; Q5_K's with a fifth bit, 0-31: VNNI's unsigned operand as it is), so
// its dot product with x's block j is dx_j * (d * scale_j * (sum of q times x's codes) - dmin *
// min_j * (sum of x's codes)). Sub-blocks 2c and 2c + 1 are the low and high nibbles of the same
// 32 bytes: one broadcast and one GF(2) affine transform give both; Q5_K's fifth bits of
// sub-block j are bit j of its 32 high bytes, two shifts of one broadcast. The header (d, dmin,
// the packed scales) is the same in both.

template <bool kFifth>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,gfni,f16c,fma"), noinline)) void
dots_vnni_q45_k(const std::byte* row, const std::byte* const* xs, std::int64_t blocks, float* out,
                int count) {
  constexpr std::int64_t kBytes = kQ45KBytes<kFifth>;
  const __m512i nibbles = _mm512_set_epi64(kHighNibble, kHighNibble, kHighNibble, kHighNibble,
                                           kLowNibble, kLowNibble, kLowNibble, kLowNibble);
  const __m512i bit = _mm512_set1_epi8(1);
  const std::int64_t groups = blocks / kGroupBlocks;
  __m256 acc[kQuantGroup];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (std::int64_t g = 0; g < groups; ++g, row += kBytes) {
    prefetch_ahead(row, kBytes);
    __m256 dw;
    __m256 mw;
    q4_k_scales(row, dw, mw);
    __m512i w[kGroupBlocks / 2];
    for (int c = 0; c < kGroupBlocks / 2; ++c) {
      w[c] = _mm512_gf2p8affine_epi64_epi8(
          _mm512_broadcast_i64x4(_mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(row + kQ45KNibbles<kFifth> + 32 * c))),
          nibbles, 0);
      if constexpr (kFifth) {
        // Bits 2c (values 0-31 of the register) and 2c + 1 (32-63) of the high bytes, at bit 4.
        w[c] = _mm512_or_si512(
            w[c], _mm512_slli_epi16(
                      _mm512_and_si512(_mm512_srlv_epi16(twice(row + 16), bit_shifts(c)), bit), 4));
      }
    }
    for (int i = 0; i < kQuantGroup && i < count; ++i) {
      const std::byte* xg = xs[i] + g * kGroupBytes;
      const __m256 code_sums =
          _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xg + kGroupSums)));
      const __m256 dx = _mm256_loadu_ps(reinterpret_cast<const float*>(xg + kGroupScales));
      const __m256 block =
          _mm256_fmsub_ps(dw, _mm256_cvtepi32_ps(group_dots(w, xg)), _mm256_mul_ps(mw, code_sums));
      acc[i] = _mm256_fmadd_ps(dx, block, acc[i]);
    }
  }
  for (int i = 0; i < kQuantGroup && i < count; ++i) out[i] = horizontal_sum(acc[i]);
}

// AVX-512 with VNNI, the k-quants whose scales cover 16 values (Q2_K, Q3_K, Q6_K): a block of 256
// values is a group of x's eight blocks of 32. Register c holds the unsigned codes of values 64c
// .. 64c + 63 (VNNI's unsigned operand as they are); a VNNI lane's four values share a scale, so
// each lane's sum less the codes' offset times the sum of its x codes (a VNNI of ones) is
// multiplied by its integer scale in int32, and the eight blocks' lanes are gathered as the other
// kernels' are and scaled by d and x's scales in float. Q2_K's value is d * scale * q - dmin *
// min: its lanes' x code sums times their mins are gathered beside them.
//   Q6_K (210 bytes): 128 bytes of low nibbles (the 64 of half c / 2, their low nibbles for even
//     c, high for odd), 64 of high bit pairs (the half's 32 bytes, shifted by 4 (c % 2) and
//     4 (c % 2) + 2), 16 int8 scales, f16 d; value d * scale * (q - 32).
//   Q3_K (110 bytes): 32 bytes of high bits (bit 2c and 2c + 1 of each), 64 of low bit pairs
//     (the half's 32 bytes, shifted as Q6_K's pairs), 12 bytes of 6-bit scales less 32, f16 d;
//     value d * scale * (q - 4), q = pair | bit << 2.
//   Q2_K (84 bytes): 16 bytes of scale and min nibbles, 64 of bit pairs (as Q3_K's), f16 d and
//     dmin.
template <Kind kKind>
struct Sixteens;

// Register c's bit pairs of the 64 bytes at `pairs` (each half's 32 bytes).
__attribute__((target("avx512f,avx512bw"))) inline __m512i bit_pairs(const std::byte* pairs,
                                                                     int c) {
  return _mm512_and_si512(_mm512_srlv_epi16(twice(pairs + 32 * (c / 2)), pair_shifts(c)),
                          _mm512_set1_epi8(0x03));
}

template <>
struct Sixteens<Kind::Q6_K> {
  static constexpr std::int64_t kBytes = kQ6KBytes, kD = kQ6KD;
  static constexpr int kOffsetShift = 5;  // q - 32
  __attribute__((target("avx512f,avx512bw"))) static __m512i codes(const std::byte* row, int c) {
    const __m512i low = _mm512_loadu_si512(row + 64 * (c / 2));
    const __m512i nibbles =
        _mm512_and_si512(c % 2 == 0 ? low : _mm512_srli_epi16(low, 4), _mm512_set1_epi8(0x0f));
    return _mm512_or_si512(nibbles, _mm512_slli_epi16(bit_pairs(row + 128, c), 4));
  }
  __attribute__((target("avx2"))) static __m128i scales(const std::byte* row) {
    return q6_k_scales(row);
  }
};

template <>
struct Sixteens<Kind::Q3_K> {
  static constexpr std::int64_t kBytes = kQ3KBytes, kD = kQ3KD;
  static constexpr int kOffsetShift = 2;  // q - 4
  __attribute__((target("avx512f,avx512bw"))) static __m512i codes(const std::byte* row, int c) {
    const __m512i high =
        _mm512_and_si512(_mm512_srlv_epi16(twice(row), bit_shifts(c)), _mm512_set1_epi8(0x01));
    return _mm512_or_si512(bit_pairs(row + 32, c), _mm512_slli_epi16(high, 2));
  }
  __attribute__((target("avx2"))) static __m128i scales(const std::byte* row) {
    return q3_k_scales(row);
  }
};

template <>
struct Sixteens<Kind::Q2_K> {
  static constexpr std::int64_t kBytes = kQ2KBytes, kD = kQ2KD;
  static constexpr int kOffsetShift = 0;  // no offset; a min instead (dmin at 82)
  __attribute__((target("avx512f,avx512bw"))) static __m512i codes(const std::byte* row, int c) {
    return bit_pairs(row + 16, c);
  }
  __attribute__((target("avx2"))) static __m128i scales(const std::byte* row) {
    return q2_k_scales(row);
  }
  __attribute__((target("avx2"))) static __m128i mins(const std::byte* row) {
    return q2_k_mins(row);
  }
};

// Byte i of register c's lane pattern: scale 4c + i / 4 (a VNNI lane's four values share it).
__attribute__((target("avx2"))) inline __m128i lane_pattern(int c) {
  alignas(16) static constexpr auto kPatterns = [] {
    std::array<std::array<std::uint8_t, 16>, 4> index{};
    for (int r = 0; r < 4; ++r) {
      for (int i = 0; i < 16; ++i) {
        index[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] =
            static_cast<std::uint8_t>(4 * r + i / 4);
      }
    }
    return index;
  }();
  return _mm_load_si128(
      reinterpret_cast<const __m128i*>(kPatterns[static_cast<std::size_t>(c)].data()));
}

// Register c's codes and the 16 scales of a block of kind (one of the three above).
__attribute__((target("avx512f,avx512bw"))) inline __m512i sixteens_codes(Kind kind,
                                                                          const std::byte* row,
                                                                          int c) {
  switch (kind) {
    case Kind::Q6_K:
      return Sixteens<Kind::Q6_K>::codes(row, c);
    case Kind::Q3_K:
      return Sixteens<Kind::Q3_K>::codes(row, c);
    default:
      return Sixteens<Kind::Q2_K>::codes(row, c);
  }
}
__attribute__((target("avx2"))) inline __m128i sixteens_scales(Kind kind, const std::byte* row) {
  switch (kind) {
    case Kind::Q6_K:
      return Sixteens<Kind::Q6_K>::scales(row);
    case Kind::Q3_K:
      return Sixteens<Kind::Q3_K>::scales(row);
    default:
      return Sixteens<Kind::Q2_K>::scales(row);
  }
}

// The three kinds differ only in their codes and scales. Q6_K (the common one) gets a body of
// its own; Q2_K and Q3_K share one that asks the kind at run time (noipa: GCC would otherwise
// clone it for each), which keeps the library's code within its size budget.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma"), always_inline)) inline void
dots_vnni_16(Kind kind, const std::byte* row, const std::byte* const* xs, std::int64_t blocks,
             float* out, int count) {
  const bool has_min = kind == Kind::Q2_K;
  // The codes' offset times x's code sums: 32 or 4 (a shift), none for Q2_K.
  std::int64_t bytes = Sixteens<Kind::Q2_K>::kBytes, d_at = Sixteens<Kind::Q2_K>::kD;
  int offset_shift = 0;
  if (kind == Kind::Q6_K) {
    bytes = Sixteens<Kind::Q6_K>::kBytes, d_at = Sixteens<Kind::Q6_K>::kD;
    offset_shift = Sixteens<Kind::Q6_K>::kOffsetShift;
  } else if (kind == Kind::Q3_K) {
    bytes = Sixteens<Kind::Q3_K>::kBytes, d_at = Sixteens<Kind::Q3_K>::kD;
    offset_shift = Sixteens<Kind::Q3_K>::kOffsetShift;
  }
  const __m128i shift = _mm_cvtsi32_si128(offset_shift);
  const __m512i keep = _mm512_set1_epi32(has_min ? 0 : -1);
  const __m512i ones = _mm512_set1_epi8(1);
  const std::int64_t groups = blocks / kGroupBlocks;
  __m256 acc[kQuantGroup];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (std::int64_t g = 0; g < groups; ++g, row += bytes) {
    prefetch_ahead(row, bytes);
    const __m128i packed_scales = sixteens_scales(kind, row);
    __m512i q[4];
    __m512i scales[4];
    __m512i mins[4];
    for (int c = 0; c < 4; ++c) {
      q[c] = sixteens_codes(kind, row, c);
      scales[c] = _mm512_cvtepi8_epi32(_mm_shuffle_epi8(packed_scales, lane_pattern(c)));
      if (has_min) {
        mins[c] = _mm512_cvtepi8_epi32(
            _mm_shuffle_epi8(Sixteens<Kind::Q2_K>::mins(row), lane_pattern(c)));
      }
    }
    for (int i = 0; i < kQuantGroup && i < count; ++i) {
      const std::byte* xg = xs[i] + g * kGroupBytes;
      __m512i lanes[4];
      __m512i min_lanes[4];
      for (int c = 0; c < 4; ++c) {
        const __m512i codes = _mm512_loadu_si512(xg + 64 * c);
        const __m512i dots = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[c], codes);
        const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, codes);
        lanes[c] = _mm512_mullo_epi32(
            _mm512_sub_epi32(dots, _mm512_and_si512(_mm512_sll_epi32(sums, shift), keep)),
            scales[c]);
        if (has_min) min_lanes[c] = _mm512_mullo_epi32(sums, mins[c]);
      }
      acc[i] = add_sixteens_block(acc[i], block_sums(lanes),
                                  has_min ? block_sums(min_lanes) : _mm256_setzero_si256(), has_min,
                                  row, d_at, xg);
    }
  }
  for (int i = 0; i < kQuantGroup && i < count; ++i) out[i] = horizontal_sum(acc[i]);
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma"), noipa)) void dots_vnni_q6_k(
    const std::byte* row, const std::byte* const* xs, std::int64_t blocks, float* out, int count) {
  dots_vnni_16(Kind::Q6_K, row, xs, blocks, out, count);
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma"), noipa)) void
dots_vnni_q23_k(Kind kind, const std::byte* row, const std::byte* const* xs, std::int64_t blocks,
                float* out, int count) {
  dots_vnni_16(kind, row, xs, blocks, out, count);
}
// dots_vnni_q23_k for kind, as a CountedKernel.
template <Kind kKind>
void q23_k_kernel(const std::byte* row, const std::byte* const* xs, std::int64_t blocks, float* out,
                  int count) {
  dots_vnni_q23_k(kKind, row, xs, blocks, out, count);
}

// d times the low 8 int8 codes of part, as floats. (A function, not a lambda: clang gives a
// lambda none of its enclosing function's target attributes.)
__attribute__((target("avx2"))) inline __m256 scaled_codes(__m256 d, __m128i part) {
  return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part)));
}

// AVX2: each block's codes widened to float once and scaled, then multiplied with each row of x.
template <Kind kKind>
__attribute__((target("avx2,f16c,fma"), noipa)) void dots_avx2(const std::byte* row,
                                                               const std::byte* const* xs,
                                                               std::int64_t blocks, float* out,
                                                               int count) {
  __m256 acc[kQuantGroup];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b, row += kBlockBytes<kKind>) {
    const __m256i codes = block_codes<kKind>(row);
    const __m128i low = _mm256_castsi256_si128(codes);
    const __m128i high = _mm256_extracti128_si256(codes, 1);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(scale_bits(row)));
    const __m256 w[4] = {scaled_codes(d, low), scaled_codes(d, _mm_srli_si128(low, 8)),
                         scaled_codes(d, high), scaled_codes(d, _mm_srli_si128(high, 8))};
    for (int i = 0; i < kQuantGroup && i < count; ++i) {
      const float* x = reinterpret_cast<const float*>(xs[i]) + b * kBlock;
      __m256 sum = acc[i];
      for (int k = 0; k < 4; ++k) sum = _mm256_fmadd_ps(w[k], _mm256_loadu_ps(x + 8 * k), sum);
      acc[i] = sum;
    }
  }
  for (int i = 0; i < kQuantGroup && i < count; ++i) out[i] = horizontal_sum(acc[i]);
}

#endif

}  // namespace

QuantKernels quant_kernels(QuantScheme::Kind kind, QuantIsa isa) noexcept {
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == QuantIsa::Avx2) return avx2_int8_kernels(kind);
  if (isa != QuantIsa::Avx512) return {};
  switch (kind) {
    case Kind::Q8_0:
      return encoded_kernels<dots_vnni<Kind::Q8_0>>();
    case Kind::Q4_0:
      return encoded_kernels<dots_vnni<Kind::Q4_0>>();
    case Kind::Q4_1:
      return encoded_kernels<legacy_kernel<Kind::Q4_1>>();
    case Kind::Q5_0:
      return encoded_kernels<legacy_kernel<Kind::Q5_0>>();
    case Kind::Q5_1:
      return encoded_kernels<legacy_kernel<Kind::Q5_1>>();
    case Kind::Q4_K:
      return encoded_kernels<dots_vnni_q45_k<false>>();
    case Kind::Q5_K:
      return encoded_kernels<dots_vnni_q45_k<true>>();
    case Kind::Q2_K:
      return encoded_kernels<q23_k_kernel<Kind::Q2_K>>();
    case Kind::Q3_K:
      return encoded_kernels<q23_k_kernel<Kind::Q3_K>>();
    case Kind::Q6_K:
      return encoded_kernels<dots_vnni_q6_k>();
    default:
      return {};
  }
#else
  (void)kind, (void)isa;
  return {};
#endif
}

QuantKernels float_x_kernels(QuantScheme::Kind kind) noexcept {
#if defined(__x86_64__) && defined(__GNUC__)
  if (kind == Kind::Q8_0)
    return {rows_of_group<dots_avx2<Kind::Q8_0>>, rows_of_one<dots_avx2<Kind::Q8_0>>, false};
  if (kind == Kind::Q4_0)
    return {rows_of_group<dots_avx2<Kind::Q4_0>>, rows_of_one<dots_avx2<Kind::Q4_0>>, false};
#endif
  (void)kind;
  return {};
}

std::int64_t encoded_row_bytes(std::int64_t blocks) noexcept {
  return (blocks + kGroupBlocks - 1) / kGroupBlocks * kGroupBytes;
}

EncodedBlock encoded_block(const std::byte* row, std::int64_t b) noexcept {
  const std::byte* group = row + b / kGroupBlocks * kGroupBytes;
  const std::int64_t j = b % kGroupBlocks;
  EncodedBlock block;
  std::memcpy(&block.scale, group + kGroupScales + 4 * lane_of(j), 4);
  std::memcpy(&block.sum, group + kGroupSums + 4 * lane_of(j), 4);
  block.codes = reinterpret_cast<const std::int8_t*>(group + j * kBlock);
  return block;
}

void encode_row(const float* x, std::int64_t blocks, std::byte* out, QuantIsa isa) noexcept {
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == QuantIsa::Avx512) return encode_row_int8(x, blocks, out);
  if (isa == QuantIsa::Avx2) return encode_row_avx2(x, blocks, out);
#endif
  (void)x, (void)blocks, (void)out, (void)isa;  // no kernel reads it
}

}  // namespace kiln::cpu
