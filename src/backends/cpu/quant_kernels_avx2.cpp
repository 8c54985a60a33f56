// The quantized products' kernels for AVX2 without AVX-512 (Haswell to Comet Lake, Zen 1 to 3),
// on x encoded as int8 blocks as the VNNI kernels read it (quant_kernel_parts.h). AVX2 has no
// VNNI: a block's 32 byte products are maddubs's (unsigned times signed bytes, summed in pairs
// to int16) and madd's (pairs of those to int32), which gives the same four-value int32 lanes as
// VNNI's multiply-add. maddubs saturates past 32767, so each kernel keeps its operands small
// enough: the weight's unsigned codes (at most 63) times x's codes (at most 127 in magnitude), or
// for signed codes (Q8_0's, and Q6_K's and Q3_K's less their offsets) their magnitudes times x's
// codes with the weight's sign (at most 2 * 128 * 127). Every sum is exact, so the blocks' int32
// dot products equal the VNNI kernels'; they are scaled in float as the VNNI kernels scale them.
// Before these kernels an AVX2 machine multiplied Q8_0 and Q4_0 in float (54 % and 29 % of a
// memcpy's rate on a 2-core Zen 3) and decoded every other kind to f32 tiles for gemm (1-2 %).
#include <cstring>

#include "backends/cpu/quant_kernel_parts.h"

namespace kiln::cpu::quant_parts {

#if defined(__x86_64__) && defined(__GNUC__)

namespace {

// The four-value int32 lanes of unsigned codes u times signed codes s (VNNI's dpbusd on AVX2);
// pairs of u * s must stay within int16.
__attribute__((target("avx2"))) inline __m256i lane_dots(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
// The same for signed codes w (|w| <= 128) and x's codes.
__attribute__((target("avx2"))) inline __m256i signed_lane_dots(__m256i w, __m256i x) {
  return lane_dots(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
}

// Eight blocks' int32 lanes (register j: block j) summed per block, in lane_of's order.
__attribute__((target("avx2"))) inline __m256i block_sums(const __m256i d[kGroupBlocks]) {
  // Each 128-bit lane of even: blocks 0, 2, 4, 6's sums of its four lanes; of odd: 1, 3, 5, 7.
  const __m256i even =
      _mm256_hadd_epi32(_mm256_hadd_epi32(d[0], d[2]), _mm256_hadd_epi32(d[4], d[6]));
  const __m256i odd =
      _mm256_hadd_epi32(_mm256_hadd_epi32(d[1], d[3]), _mm256_hadd_epi32(d[5], d[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(even, odd, 0x20),
                          _mm256_permute2x128_si256(even, odd, 0x31));
}

__attribute__((target("avx2"))) inline std::int32_t horizontal_sum_i32(__m256i v) {
  const __m128i sum4 = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i sum2 = _mm_add_epi32(sum4, _mm_unpackhi_epi64(sum4, sum4));
  return _mm_cvtsi128_si32(_mm_add_epi32(sum2, _mm_shuffle_epi32(sum2, 1)));
}

// v's 16-bit lanes shifted right by a count known only at run time.
__attribute__((target("avx2"))) inline __m256i shift_right(__m256i v, int count) {
  return _mm256_srl_epi16(v, _mm_cvtsi32_si128(count));
}
__attribute__((target("avx2"))) inline __m256i load32(const std::byte* at) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
}

// A legacy block's 32 codes as the kernel multiplies them: Q8_0's signed bytes; the others'
// nibbles (values 0-15 the low ones, 16-31 the high ones) with Q5's fifth bits (bit i of a
// 32-bit mask is value i's), unsigned.
__attribute__((target("avx2"))) inline __m256i legacy_codes_avx2(const LegacyLayout& l,
                                                                 const std::byte* block) {
  if (l.signed_codes) return load32(block + 2);
  const __m256i twice = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + l.nibbles())));
  const __m256i codes = _mm256_and_si256(
      _mm256_srlv_epi32(twice, _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0)), _mm256_set1_epi8(0x0f));
  if (l.high < 0) return codes;
  std::uint32_t high;
  std::memcpy(&high, block + l.high, 4);
  // Byte i gets byte i / 8 of the mask, then bit i % 8 of it.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(high)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_or_si256(codes, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
}

// The four-value lanes of a legacy block's codes w (legacy_codes_avx2) times x's codes.
__attribute__((target("avx2"))) inline __m256i legacy_lane_dots(const LegacyLayout& l, __m256i w,
                                                                __m256i x) {
  return l.signed_codes ? signed_lane_dots(w, x) : lane_dots(w, x);
}

// Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1: eight blocks at a time, one a register; the eight blocks' dot
// products gathered into one register, less the codes' offset times x's code sums, scaled in
// float as dots_vnni_legacy scales them. A last group of fewer than eight, a block at a time.
__attribute__((target("avx2,f16c,fma"), always_inline)) inline void dots_legacy(
    const LegacyLayout l, const std::byte* row, const std::byte* const* xs, std::int64_t blocks,
    float* out, int count) {
  const std::int64_t groups = blocks / kGroupBlocks;
  __m256 acc[kQuantGroup];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (std::int64_t g = 0; g < groups; ++g, row += kGroupBlocks * l.bytes) {
    prefetch_ahead(row, kGroupBlocks * l.bytes);
    __m256i w[kGroupBlocks];
    for (int j = 0; j < kGroupBlocks; ++j) w[j] = legacy_codes_avx2(l, row + j * l.bytes);
    const __m256 dw = group_halves(row, l.bytes, 0);
    const __m256 mw = l.min >= 0 ? group_halves(row, l.bytes, l.min) : _mm256_setzero_ps();
    for (int i = 0; i < kQuantGroup && i < count; ++i) {
      const std::byte* xg = xs[i] + g * kGroupBytes;
      __m256i lanes[kGroupBlocks];
      for (int j = 0; j < kGroupBlocks; ++j) {
        lanes[j] = legacy_lane_dots(l, w[j], load32(xg + j * kBlock));
      }
      const __m256i code_sums = load32(xg + kGroupSums);
      const __m256i dots = _mm256_sub_epi32(
          block_sums(lanes), _mm256_mullo_epi32(_mm256_set1_epi32(l.offset), code_sums));
      const __m256 dx = _mm256_loadu_ps(reinterpret_cast<const float*>(xg + kGroupScales));
      const __m256 block = l.min >= 0
                               ? _mm256_fmadd_ps(dw, _mm256_cvtepi32_ps(dots),
                                                 _mm256_mul_ps(mw, _mm256_cvtepi32_ps(code_sums)))
                               : _mm256_mul_ps(dw, _mm256_cvtepi32_ps(dots));
      acc[i] = _mm256_fmadd_ps(dx, block, acc[i]);
    }
  }
  for (int i = 0; i < kQuantGroup && i < count; ++i) {
    float partial = 0.0f;
    for (std::int64_t b = groups * kGroupBlocks; b < blocks; ++b) {
      const std::byte* block = row + (b - groups * kGroupBlocks) * l.bytes;
      const EncodedBlock xb = encoded_block(xs[i], b);
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.codes));
      const std::int32_t total =
          horizontal_sum_i32(legacy_lane_dots(l, legacy_codes_avx2(l, block), x)) -
          l.offset * xb.sum;
      const float d = _cvtsh_ss(scale_bits(block));
      const float m = l.min >= 0 ? _cvtsh_ss(scale_bits(block + l.min)) : 0.0f;
      partial += xb.scale * (d * static_cast<float>(total) + m * static_cast<float>(xb.sum));
    }
    out[i] = horizontal_sum(acc[i]) + partial;
  }
}

// Q4_K and Q5_K: a block of 256 values is a group of x's eight blocks of 32, its sub-blocks
// 2c and 2c + 1 the low and high nibbles of 32 bytes (Q5_K's fifth bits: bits 2c and 2c + 1 of
// its 32 high bytes); scaled as dots_vnni_q45_k scales them.
template <bool kFifth>
__attribute__((target("avx2,f16c,fma"), always_inline)) inline void dots_q45_k(
    const std::byte* row, const std::byte* const* xs, std::int64_t blocks, float* out, int count) {
  constexpr std::int64_t kBytes = kQ45KBytes<kFifth>;
  const __m256i low_nibble = _mm256_set1_epi8(0x0f), bit = _mm256_set1_epi8(1);
  const std::int64_t groups = blocks / kGroupBlocks;
  __m256 acc[kQuantGroup];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (std::int64_t g = 0; g < groups; ++g, row += kBytes) {
    prefetch_ahead(row, kBytes);
    __m256 dw;
    __m256 mw;
    q4_k_scales(row, dw, mw);
    __m256i w[kGroupBlocks];
    for (int c = 0; c < kGroupBlocks / 2; ++c) {
      const __m256i packed = load32(row + kQ45KNibbles<kFifth> + 32 * c);
      w[2 * c] = _mm256_and_si256(packed, low_nibble);
      w[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibble);
      if constexpr (kFifth) {
        const __m256i high = load32(row + 16);
        for (int h = 0; h < 2; ++h) {
          w[2 * c + h] = _mm256_or_si256(
              w[2 * c + h],
              _mm256_slli_epi16(_mm256_and_si256(shift_right(high, 2 * c + h), bit), 4));
        }
      }
    }
    for (int i = 0; i < kQuantGroup && i < count; ++i) {
      const std::byte* xg = xs[i] + g * kGroupBytes;
      __m256i lanes[kGroupBlocks];
      for (int j = 0; j < kGroupBlocks; ++j) lanes[j] = lane_dots(w[j], load32(xg + j * kBlock));
      const __m256 code_sums = _mm256_cvtepi32_ps(load32(xg + kGroupSums));
      const __m256 dx = _mm256_loadu_ps(reinterpret_cast<const float*>(xg + kGroupScales));
      const __m256 block =
          _mm256_fmsub_ps(dw, _mm256_cvtepi32_ps(block_sums(lanes)), _mm256_mul_ps(mw, code_sums));
      acc[i] = _mm256_fmadd_ps(dx, block, acc[i]);
    }
  }
  for (int i = 0; i < kQuantGroup && i < count; ++i) out[i] = horizontal_sum(acc[i]);
}

// Q6_K, Q3_K and Q2_K (scales of 16 values): a block of 256 values is a group of x's eight blocks
// of 32; block h's codes are bit fields of the 32 bytes of quarter h / 2 (Q6_K's nibbles: low
// for even quarters, high for odd; bit pairs shifted by 4 (q % 2) + 2 (h % 2), q = h / 2; Q3_K's
// high bits: bit h). Q6_K's and Q3_K's codes less their offsets (32, 4) are signed; each int16
// pair of byte products shares a scale, so madd with the scales, each broadcast to its 16
// values' int16 lanes, gives the scaled int32 lanes at once. Q2_K's codes are unsigned, and its
// mins multiply the sums of x's codes (maddubs with ones).
__attribute__((target("avx2"))) inline __m256i sixteens_codes(Kind kind, const std::byte* row,
                                                              int h) {
  const int quarter = h / 2;
  const int pair_shift = 4 * (quarter % 2) + 2 * (h % 2);
  const __m256i pair_mask = _mm256_set1_epi8(0x03);
  switch (kind) {
    case Kind::Q6_K: {
      const __m256i bytes = load32(row + 64 * (quarter / 2) + 32 * (h % 2));
      const __m256i nibbles = _mm256_and_si256(
          quarter % 2 == 0 ? bytes : _mm256_srli_epi16(bytes, 4), _mm256_set1_epi8(0x0f));
      const __m256i pairs = _mm256_and_si256(
          shift_right(load32(row + 128 + 32 * (quarter / 2)), pair_shift), pair_mask);
      return _mm256_sub_epi8(_mm256_or_si256(nibbles, _mm256_slli_epi16(pairs, 4)),
                             _mm256_set1_epi8(32));
    }
    case Kind::Q3_K: {
      const __m256i pairs = _mm256_and_si256(
          shift_right(load32(row + 32 + 32 * (quarter / 2)), pair_shift), pair_mask);
      const __m256i high = _mm256_and_si256(shift_right(load32(row), h), _mm256_set1_epi8(1));
      return _mm256_sub_epi8(_mm256_or_si256(pairs, _mm256_slli_epi16(high, 2)),
                             _mm256_set1_epi8(4));
    }
    default:
      return _mm256_and_si256(shift_right(load32(row + 16 + 32 * (quarter / 2)), pair_shift),
                              pair_mask);
  }
}

// Block h's 16 int16 lanes of its two scales (each of 16 values: int16 lanes 0-7 scale 2h, 8-15
// scale 2h + 1) from the block's 16 int8 scales.
__attribute__((target("avx2"))) inline __m256i scale_lanes(__m128i scales, int h) {
  alignas(16) static constexpr auto kPatterns = [] {
    std::array<std::array<std::uint8_t, 16>, kGroupBlocks> index{};
    for (int b = 0; b < kGroupBlocks; ++b) {
      for (int e = 0; e < 16; ++e) {
        index[static_cast<std::size_t>(b)][static_cast<std::size_t>(e)] =
            static_cast<std::uint8_t>(2 * b + e / 8);
      }
    }
    return index;
  }();
  return _mm256_cvtepi8_epi16(
      _mm_shuffle_epi8(scales, _mm_load_si128(reinterpret_cast<const __m128i*>(
                                   kPatterns[static_cast<std::size_t>(h)].data()))));
}

__attribute__((target("avx2,f16c,fma"), always_inline)) inline void dots_16(
    Kind kind, const std::byte* row, const std::byte* const* xs, std::int64_t blocks, float* out,
    int count) {
  const bool has_min = kind == Kind::Q2_K;
  const std::int64_t bytes = kind == Kind::Q6_K   ? kQ6KBytes
                             : kind == Kind::Q3_K ? kQ3KBytes
                                                  : kQ2KBytes;
  const std::int64_t d_at = kind == Kind::Q6_K ? kQ6KD : kind == Kind::Q3_K ? kQ3KD : kQ2KD;
  const std::int64_t groups = blocks / kGroupBlocks;
  __m256 acc[kQuantGroup];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (std::int64_t g = 0; g < groups; ++g, row += bytes) {
    prefetch_ahead(row, bytes);
    const __m128i packed_scales = kind == Kind::Q6_K   ? q6_k_scales(row)
                                  : kind == Kind::Q3_K ? q3_k_scales(row)
                                                       : q2_k_scales(row);
    const __m128i packed_mins = has_min ? q2_k_mins(row) : _mm_setzero_si128();
    __m256i w[kGroupBlocks];
    __m256i magnitudes[kGroupBlocks];
    __m256i scales[kGroupBlocks];
    __m256i mins[kGroupBlocks];
    for (int h = 0; h < kGroupBlocks; ++h) {
      w[h] = sixteens_codes(kind, row, h);
      magnitudes[h] = has_min ? w[h] : _mm256_abs_epi8(w[h]);
      scales[h] = scale_lanes(packed_scales, h);
      mins[h] = has_min ? scale_lanes(packed_mins, h) : _mm256_setzero_si256();
    }
    for (int i = 0; i < kQuantGroup && i < count; ++i) {
      const std::byte* xg = xs[i] + g * kGroupBytes;
      __m256i lanes[kGroupBlocks];
      __m256i min_lanes[kGroupBlocks];
      for (int h = 0; h < kGroupBlocks; ++h) {
        const __m256i x = load32(xg + h * kBlock);
        const __m256i pairs =
            _mm256_maddubs_epi16(magnitudes[h], has_min ? x : _mm256_sign_epi8(x, w[h]));
        lanes[h] = _mm256_madd_epi16(pairs, scales[h]);
        if (has_min) {
          min_lanes[h] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), x), mins[h]);
        }
      }
      acc[i] = add_sixteens_block(acc[i], block_sums(lanes),
                                  has_min ? block_sums(min_lanes) : _mm256_setzero_si256(), has_min,
                                  row, d_at, xg);
    }
  }
  for (int i = 0; i < kQuantGroup && i < count; ++i) out[i] = horizontal_sum(acc[i]);
}
// One body per kind and count of x's rows (one or four): with the kind known, each drops the
// others' fields and branches (a body shared by Q2_K and Q3_K that asked the kind at run time
// ran Q3_K in 9.4 ms over 8192 x 8192, 3.75 with its own), and with the count known the
// accumulators stay in registers (a body for any count kept them on the stack, a store and a load
// in each group's dependency chain: Q4_0 over 8192 x 8192 at 0.78-0.82 of a memcpy's rate, 0.94
// without).
template <Kind kKind, int kCount>
__attribute__((target("avx2,f16c,fma"), noinline)) void kind_rows(const std::byte* row,
                                                                  const std::byte* const* xs,
                                                                  std::int64_t blocks, float* out) {
  if constexpr (kKind == Kind::Q8_0 || kKind == Kind::Q4_0 || kKind == Kind::Q4_1 ||
                kKind == Kind::Q5_0 || kKind == Kind::Q5_1) {
    dots_legacy(legacy_layout(kKind), row, xs, blocks, out, kCount);
  } else if constexpr (kKind == Kind::Q4_K || kKind == Kind::Q5_K) {
    dots_q45_k<kKind == Kind::Q5_K>(row, xs, blocks, out, kCount);
  } else {
    dots_16(kKind, row, xs, blocks, out, kCount);
  }
}
template <Kind kKind>
constexpr QuantKernels kind_kernels() {
  return {kind_rows<kKind, kQuantGroup>, kind_rows<kKind, 1>, true};
}
// The kernels of whichever of kKinds kind is; empty for any other.
template <Kind... kKinds>
QuantKernels kernels_of(Kind kind) {
  QuantKernels kernels;
  (void)((kind == kKinds && (kernels = kind_kernels<kKinds>(), true)) || ...);
  return kernels;
}

}  // namespace

QuantKernels avx2_int8_kernels(Kind kind) noexcept {
  return kernels_of<Kind::Q8_0, Kind::Q4_0, Kind::Q4_1, Kind::Q5_0, Kind::Q5_1, Kind::Q2_K,
                    Kind::Q3_K, Kind::Q4_K, Kind::Q5_K, Kind::Q6_K>(kind);
}

// The AVX-512 encoder's arithmetic (quant_kernels.cpp's encode_row_int8) on 8 lanes: the same
// division and rounding, so the same bytes.
__attribute__((target("avx2,fma"))) void encode_row_avx2(const float* x, std::int64_t blocks,
                                                         std::byte* out) noexcept {
  const std::int64_t groups = (blocks + kGroupBlocks - 1) / kGroupBlocks;
  std::memset(out, 0, static_cast<std::size_t>(groups * kGroupBytes));
  const __m256 sign = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f),
               one = _mm256_set1_ps(1.0f), high = _mm256_set1_ps(127.0f),
               low = _mm256_set1_ps(-127.0f);
  for (std::int64_t b = 0; b < blocks; ++b, x += kBlock) {
    std::byte* group = out + b / kGroupBlocks * kGroupBytes;
    const std::int64_t j = b % kGroupBlocks;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int h = 0; h < 4; ++h) {
      v[h] = _mm256_loadu_ps(x + 8 * h);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[h]));
    }
    __m128 max4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    max4 = _mm_max_ps(max4, _mm_movehl_ps(max4, max4));
    max4 = _mm_max_ss(max4, _mm_movehdup_ps(max4));
    const float d = _mm_cvtss_f32(max4) / 127.0f;
    std::int32_t sum = 0;
    if (d != 0.0f) {
      const __m256 dv = _mm256_set1_ps(d);
      __m256i codes[4];
      for (int h = 0; h < 4; ++h) {
        const __m256 q = _mm256_div_ps(v[h], dv);
        // round(q): truncate, then one step away from zero where the dropped part (exact) is at
        // least a half.
        const __m256 t = _mm256_round_ps(q, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        const __m256 up =
            _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(q, t)), half, _CMP_GE_OQ);
        const __m256 away = _mm256_or_ps(one, _mm256_and_ps(q, sign));
        const __m256 r =
            _mm256_min_ps(high, _mm256_max_ps(low, _mm256_add_ps(t, _mm256_and_ps(up, away))));
        codes[h] = _mm256_cvttps_epi32(r);
      }
      sum = horizontal_sum_i32(_mm256_add_epi32(_mm256_add_epi32(codes[0], codes[1]),
                                                _mm256_add_epi32(codes[2], codes[3])));
      // packs interleave 128-bit lanes: bytes come out as 4-byte runs of codes[0..3]'s low
      // halves, then their high halves; the permute puts the runs back in value order.
      const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(codes[0], codes[1]),
                                               _mm256_packs_epi32(codes[2], codes[3]));
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(group + j * kBlock),
          _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
    std::memcpy(group + kGroupScales + 4 * lane_of(j), &d, 4);
    std::memcpy(group + kGroupSums + 4 * lane_of(j), &sum, 4);
  }
}

#endif

}  // namespace kiln::cpu::quant_parts
