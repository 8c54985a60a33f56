// The blocks of kiln's quantization schemes (layouts in kiln/quant.h) as the CUDA kernels read
// them, one text for two compilers: NVRTC compiles it into every quantized kernel (CMake embeds
// it as the string kQuantBlocksSource, quant_source.cpp), and the host tests include it to check
// every reading against src/quant's decoders without a GPU. So under NVRTC it includes nothing
// and names no std type.
//
// Two readings of a block, per kind (the structs Kq*):
//   - decode8(b, j, out): values 8j .. 8j + 7 of block b as f32, each computed as src/quant
//     computes it (the same products and sums, each rounded once, never fused): dequantize and
//     the embedding lookup give the host decoder's values bit for bit.
//   - the product's reading: a step of kStep values (32, or 16 where the kind's scales change
//     every 16 values) shares one multiplier and addend, value = mul * (u - kBias) + add, u an
//     unsigned code of at most 8 bits. codes(b, step, chunk, t) gives the codes of values
//     step * kStep + 16 * chunk + 4t + e (e = 0..3) in byte e of a word; kq_pack turns them into
//     two pairs of exact 16-bit floats (u - kBias), the A operand of a tensor-core product whose
//     k slots 2t, 2t + 1, 2t + 8, 2t + 9 hold values 4t .. 4t + 3 of the chunk (kq_a_fragment);
//     the B operand (x) takes the same values from 8 consecutive bytes. scale(b, step, mul, add)
//     gives the step's mul and add, applied in f32 to the step's sums (kq_apply).
//     kq_add(kq_mul(mul, u - kBias), add) is decode8's value bit for bit.
#ifndef KILN_CUDA_QUANT_BLOCKS_H
#define KILN_CUDA_QUANT_BLOCKS_H

#ifdef __CUDACC_RTC__
#define KQ_FN __device__ __forceinline__
#define KQ_UNROLL _Pragma("unroll")
#else
#include <cmath>
#include <cstring>
#include <limits>

#include "kiln/half.h"
#define KQ_FN inline
#define KQ_UNROLL
#endif

namespace kiln::cuda::quant_blocks {

// ---- bytes, little-endian, at any alignment ----
KQ_FN unsigned kq_u8(const unsigned char* p) { return p[0]; }
KQ_FN unsigned kq_u16(const unsigned char* p) {
  return static_cast<unsigned>(p[0]) | (static_cast<unsigned>(p[1]) << 8);
}
KQ_FN unsigned kq_u32(const unsigned char* p) {
#ifdef __CUDACC_RTC__
  // The aligned words holding the four bytes (never a word past them), joined by a funnel shift.
  // The words' address is p less its misalignment, not an integer made a pointer again, so the
  // compiler still knows where p points (a block in shared memory reads as ld.shared, not as a
  // generic load with 64-bit address arithmetic).
  const unsigned misaligned = static_cast<unsigned>(reinterpret_cast<unsigned long long>(p) & 3);
  const unsigned* word = reinterpret_cast<const unsigned*>(p - misaligned);
  const unsigned high = misaligned != 0 ? word[1] : word[0];
  return __funnelshift_r(word[0], high, misaligned * 8);
#else
  unsigned value;
  std::memcpy(&value, p, 4);
  return value;
#endif
}
KQ_FN float kq_f32(const unsigned char* p) {
#ifdef __CUDACC_RTC__
  return __uint_as_float(kq_u32(p));
#else
  float value;
  std::memcpy(&value, p, 4);
  return value;
#endif
}

// A float's bits, and the float of bits.
KQ_FN unsigned kq_f32_bits(float v) {
#ifdef __CUDACC_RTC__
  return __float_as_uint(v);
#else
  unsigned bits;
  std::memcpy(&bits, &v, 4);
  return bits;
#endif
}
KQ_FN float kq_bits_f32(unsigned bits) {
#ifdef __CUDACC_RTC__
  return __uint_as_float(bits);
#else
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
#endif
}

// ---- readers of a block's bytes, for the product readings (codes and scale) ----
// kq_r8 / kq_r16 / kq_r32(b, off): the byte(s) at offset off of block b, little-endian. b is a
// pointer (any alignment); or KqWords, the block already in registers as aligned words, where
// offsets known at compile time pick registers; or KqStaged, a block in a kernel's shared-memory
// stage, read as whole aligned words joined by funnel shifts: its misalignment is found once, not
// at every read, and a read may take the word after its bytes (the stages leave room for it); or
// KqAligned, a staged block known to start on a word.
KQ_FN unsigned kq_funnel(unsigned lo, unsigned hi, unsigned shift) {
#ifdef __CUDACC_RTC__
  return __funnelshift_r(lo, hi, shift);
#else
  return shift == 0 ? lo : (lo >> shift) | (hi << (32 - shift));
#endif
}
KQ_FN unsigned kq_r8(const unsigned char* b, int off) { return b[off]; }
KQ_FN unsigned kq_r16(const unsigned char* b, int off) { return kq_u16(b + off); }
KQ_FN unsigned kq_r32(const unsigned char* b, int off) { return kq_u32(b + off); }

template <int kWords>
struct KqWords {
  unsigned w[kWords];
};
template <int kWords>
KQ_FN unsigned kq_r32(const KqWords<kWords>& b, int off) {
  const int i = off >> 2;
  const unsigned shift = static_cast<unsigned>(off & 3) * 8;
  return shift == 0 ? b.w[i] : kq_funnel(b.w[i], b.w[i + 1], shift);
}
template <int kWords>
KQ_FN unsigned kq_r16(const KqWords<kWords>& b, int off) {
  return kq_r32(b, off) & 0xFFFFu;
}
template <int kWords>
KQ_FN unsigned kq_r8(const KqWords<kWords>& b, int off) {
  return (b.w[off >> 2] >> ((off & 3) * 8)) & 0xFFu;
}

// The kWords words from p, whose address % 4 is `misaligned` (where the caller knows it without
// asking the address): kWords + 1 aligned words read, each pair joined by a funnel shift.
template <int kWords>
KQ_FN KqWords<kWords> kq_load_words(const unsigned char* p, unsigned misaligned) {
  const unsigned* at = reinterpret_cast<const unsigned*>(p - misaligned);
  unsigned raw[kWords + 1];
  KQ_UNROLL for (int i = 0; i <= kWords; ++i) raw[i] = at[i];
  KqWords<kWords> out;
  KQ_UNROLL for (int i = 0; i < kWords; ++i) out.w[i] =
      kq_funnel(raw[i], raw[i + 1], 8 * misaligned);
  return out;
}

struct KqStaged {
  const unsigned* at;   // the aligned word holding the block's first byte
  unsigned misaligned;  // the block's first byte within it
};
KQ_FN KqStaged kq_staged(const unsigned char* p, unsigned misaligned) {
  KqStaged b;
  b.at = reinterpret_cast<const unsigned*>(p - misaligned);
  b.misaligned = misaligned;
  return b;
}
KQ_FN unsigned kq_r32(const KqStaged& b, int off) {
  const unsigned q = b.misaligned + static_cast<unsigned>(off);
  return kq_funnel(b.at[q >> 2], b.at[(q >> 2) + 1], (q & 3) * 8);
}
KQ_FN unsigned kq_r16(const KqStaged& b, int off) { return kq_r32(b, off) & 0xFFFFu; }
KQ_FN unsigned kq_r8(const KqStaged& b, int off) {
  const unsigned q = b.misaligned + static_cast<unsigned>(off);
  return (b.at[q >> 2] >> ((q & 3) * 8)) & 0xFFu;
}

// A block in a stage whose first byte is 4-byte aligned: a read at an offset the compiler knows
// to be a multiple of 4 is one load.
struct KqAligned {
  const unsigned* at;
};
KQ_FN unsigned kq_r32(const KqAligned& b, int off) {
  const unsigned shift = static_cast<unsigned>(off & 3) * 8;
  return shift == 0 ? b.at[off >> 2] : kq_funnel(b.at[off >> 2], b.at[(off >> 2) + 1], shift);
}
KQ_FN unsigned kq_r16(const KqAligned& b, int off) { return kq_r32(b, off) & 0xFFFFu; }
KQ_FN unsigned kq_r8(const KqAligned& b, int off) {
  return (b.at[off >> 2] >> ((off & 3) * 8)) & 0xFFu;
}

// A reader's bytes from offset `base` on: KqAt{b, base} reads b at base + off.
template <class B>
struct KqAt {
  const B& b;
  int base;
};
template <class B>
KQ_FN unsigned kq_r32(const KqAt<B>& v, int off) {
  return kq_r32(v.b, v.base + off);
}

// ---- exact arithmetic: an f16 scale widened exactly, one rounding per operation ----
KQ_FN float kq_half(unsigned bits) {
#ifdef __CUDACC_RTC__
  float value;
  const unsigned short h = static_cast<unsigned short>(bits);
  asm("cvt.f32.f16 %0, %1;" : "=f"(value) : "h"(h));
  return value;
#else
  return f16_bits_to_float(static_cast<std::uint16_t>(bits));
#endif
}
KQ_FN float kq_mul(float a, float b) {
#ifdef __CUDACC_RTC__
  return __fmul_rn(a, b);
#else
  // The product of two floats is exact in double, so one rounding to float is the float product,
  // and no compiler can fuse it with a following sum.
  return static_cast<float>(static_cast<double>(a) * static_cast<double>(b));
#endif
}
KQ_FN float kq_add(float a, float b) {
#ifdef __CUDACC_RTC__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
KQ_FN float kq_sub(float a, float b) {
#ifdef __CUDACC_RTC__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
KQ_FN float kq_int(int v) { return static_cast<float>(v); }

// ---- bit fields ----
// Bits 0..3 of v as bit 0 of bytes 0..3 (the fifth bits of four values): bit e of v lands at
// 8e among shifts by 0, 7, 14 and 21, which never overlap.
KQ_FN unsigned kq_spread4(unsigned v) { return (v * 0x00204081u) & 0x01010101u; }
// Value v of a 32-value block's nibbles: v < 16 in the low half of byte v, else the high half of
// byte v - 16.
KQ_FN int kq_nibble32(const unsigned char* qs, int v) {
  return v < 16 ? (qs[v] & 0x0F) : (qs[v - 16] >> 4);
}
// The 6-bit scale and min of sub-block j of Q4_K and Q5_K (quant/blocks.h's scale_min), whose
// 12 packed bytes are at offset `at` of block b.
template <class B>
KQ_FN void kq_scale_min(const B& b, int at, int j, int& scale, int& min) {
  if (j < 4) {
    scale = static_cast<int>(kq_r8(b, at + j) & 63);
    min = static_cast<int>(kq_r8(b, at + j + 4) & 63);
  } else {
    const unsigned packed = kq_r8(b, at + j + 4);
    scale = static_cast<int>((packed & 0x0F) | ((kq_r8(b, at + j - 4) >> 6) << 4));
    min = static_cast<int>((packed >> 4) | ((kq_r8(b, at + j) >> 6) << 4));
  }
}
// Q3_K's sixteen 6-bit scales, less 32, packed in 12 bytes at offset `at` of block b.
template <class B>
KQ_FN int kq_q3_scale(const B& b, int at, int j) {
  const int low = static_cast<int>((kq_r8(b, at + j % 8) >> (4 * (j / 8))) & 0x0F);
  const int high = static_cast<int>((kq_r8(b, at + 8 + j % 4) >> (2 * (j / 4))) & 3);
  return (low | (high << 4)) - 32;
}
// Value i's two bits in Q2_K's and Q3_K's 64-byte field (bit pair s of byte l: value 32s + l of
// each group of 128).
KQ_FN int kq_two_bits(const unsigned char* qs, int i) {
  const int within = i % 128;
  return (qs[32 * (i / 128) + within % 32] >> (2 * (within / 32))) & 3;
}
// Value i's bit in a 32-byte field: bit i / 32 of byte i % 32.
KQ_FN int kq_high_bit(const unsigned char* bits, int i) { return (bits[i % 32] >> (i / 32)) & 1; }
// Value i's nibble in Q4_K's and Q5_K's 128-byte field.
KQ_FN int kq_k_nibble(const unsigned char* qs, int i) {
  const unsigned b = qs[32 * (i / 64) + i % 32];
  return (i % 64) < 32 ? static_cast<int>(b & 0x0F) : static_cast<int>(b >> 4);
}
// The low (or, with high, the upper) nibbles of the four bytes of w, one a byte.
KQ_FN unsigned kq_nibbles(unsigned w, bool high) { return (high ? w >> 4 : w) & 0x0F0F0F0Fu; }

// ---- the kinds ----
// kValues values of kBytes bytes a block; kStep values share a scale; kWide: codes take all 8
// bits (the others stay below 128); kHasMin: the addend is not zero.

struct KqQ4_0 {
  static constexpr int kValues = 32, kBytes = 18, kStep = 32, kBias = 8;
  static constexpr bool kWide = false, kHasMin = false;
  static KQ_FN void decode8(const unsigned char* b, int j, float* out) {
    const float d = kq_half(kq_u16(b));
    KQ_UNROLL for (int e = 0; e < 8; ++e) out[e] =
        kq_mul(kq_int(kq_nibble32(b + 2, 8 * j + e) - 8), d);
  }
  template <class B>
  static KQ_FN unsigned codes(const B& b, int, int chunk, int t) {
    return kq_nibbles(kq_r32(b, 2 + 4 * t), chunk != 0);
  }
  template <class B>
  static KQ_FN void scale(const B& b, int, float& mul, float& add) {
    mul = kq_half(kq_r16(b, 0));
    add = 0.0f;
  }
};

struct KqQ4_1 {
  static constexpr int kValues = 32, kBytes = 20, kStep = 32, kBias = 0;
  static constexpr bool kWide = false, kHasMin = true;
  static KQ_FN void decode8(const unsigned char* b, int j, float* out) {
    const float d = kq_half(kq_u16(b)), m = kq_half(kq_u16(b + 2));
    KQ_UNROLL for (int e = 0; e < 8; ++e) out[e] =
        kq_add(kq_mul(kq_int(kq_nibble32(b + 4, 8 * j + e)), d), m);
  }
  template <class B>
  static KQ_FN unsigned codes(const B& b, int, int chunk, int t) {
    return kq_nibbles(kq_r32(b, 4 + 4 * t), chunk != 0);
  }
  template <class B>
  static KQ_FN void scale(const B& b, int, float& mul, float& add) {
    mul = kq_half(kq_r16(b, 0));
    add = kq_half(kq_r16(b, 2));
  }
};

struct KqQ5_0 {
  static constexpr int kValues = 32, kBytes = 22, kStep = 32, kBias = 16;
  static constexpr bool kWide = false, kHasMin = false;
  static KQ_FN void decode8(const unsigned char* b, int j, float* out) {
    const float d = kq_half(kq_u16(b));
    const unsigned high = kq_u32(b + 2);
    KQ_UNROLL for (int e = 0; e < 8; ++e) {
      const int v = 8 * j + e;
      const int q = kq_nibble32(b + 6, v) | static_cast<int>(((high >> v) & 1u) << 4);
      out[e] = kq_mul(kq_int(q - 16), d);
    }
  }
  template <class B>
  static KQ_FN unsigned codes(const B& b, int, int chunk, int t) {
    const unsigned fifth = (kq_r32(b, 2) >> (16 * chunk + 4 * t)) & 0xFu;
    return kq_nibbles(kq_r32(b, 6 + 4 * t), chunk != 0) | (kq_spread4(fifth) << 4);
  }
  template <class B>
  static KQ_FN void scale(const B& b, int, float& mul, float& add) {
    mul = kq_half(kq_r16(b, 0));
    add = 0.0f;
  }
};

struct KqQ5_1 {
  static constexpr int kValues = 32, kBytes = 24, kStep = 32, kBias = 0;
  static constexpr bool kWide = false, kHasMin = true;
  static KQ_FN void decode8(const unsigned char* b, int j, float* out) {
    const float d = kq_half(kq_u16(b)), m = kq_half(kq_u16(b + 2));
    const unsigned high = kq_u32(b + 4);
    KQ_UNROLL for (int e = 0; e < 8; ++e) {
      const int v = 8 * j + e;
      const int q = kq_nibble32(b + 8, v) | static_cast<int>(((high >> v) & 1u) << 4);
      out[e] = kq_add(kq_mul(kq_int(q), d), m);
    }
  }
  template <class B>
  static KQ_FN unsigned codes(const B& b, int, int chunk, int t) {
    const unsigned fifth = (kq_r32(b, 4) >> (16 * chunk + 4 * t)) & 0xFu;
    return kq_nibbles(kq_r32(b, 8 + 4 * t), chunk != 0) | (kq_spread4(fifth) << 4);
  }
  template <class B>
  static KQ_FN void scale(const B& b, int, float& mul, float& add) {
    mul = kq_half(kq_r16(b, 0));
    add = kq_half(kq_r16(b, 2));
  }
};

struct KqQ8_0 {
  static constexpr int kValues = 32, kBytes = 34, kStep = 32, kBias = 128;
  static constexpr bool kWide = true, kHasMin = false;
  static KQ_FN void decode8(const unsigned char* b, int j, float* out) {
    const float d = kq_half(kq_u16(b));
    KQ_UNROLL for (int e = 0; e < 8; ++e) out[e] =
        kq_mul(kq_int(static_cast<signed char>(b[2 + 8 * j + e])), d);
  }
  // The signed bytes with the sign bit flipped: u = q + 128.
  template <class B>
  static KQ_FN unsigned codes(const B& b, int, int chunk, int t) {
    return kq_r32(b, 2 + 16 * chunk + 4 * t) ^ 0x80808080u;
  }
  template <class B>
  static KQ_FN void scale(const B& b, int, float& mul, float& add) {
    mul = kq_half(kq_r16(b, 0));
    add = 0.0f;
  }
};

struct KqQ2_K {
  static constexpr int kValues = 256, kBytes = 84, kStep = 16, kBias = 0;
  static constexpr bool kWide = false, kHasMin = true;
  static KQ_FN void decode8(const unsigned char* b, int j, float* out) {
    const float d = kq_half(kq_u16(b + 80)), dmin = kq_half(kq_u16(b + 82));
    const unsigned packed = b[j / 2];  // sub-block of 16 values
    const float scale = kq_mul(d, kq_int(static_cast<int>(packed & 0x0F)));
    const float min = kq_mul(dmin, kq_int(static_cast<int>(packed >> 4)));
    KQ_UNROLL for (int e = 0; e < 8; ++e) out[e] =
        kq_sub(kq_mul(scale, kq_int(kq_two_bits(b + 16, 8 * j + e))), min);
  }
  // Values 16s + 4t + e: bit pair (s % 8) / 2 of bytes 32 (s / 8) + 16 (s % 2) + 4t + e.
  template <class B>
  static KQ_FN unsigned codes(const B& b, int s, int, int t) {
    return (kq_r32(b, 16 + 32 * (s / 8) + 16 * (s % 2) + 4 * t) >> (2 * ((s % 8) / 2))) &
           0x03030303u;
  }
  template <class B>
  static KQ_FN void scale(const B& b, int s, float& mul, float& add) {
    const unsigned packed = kq_r8(b, s);
    mul = kq_mul(kq_half(kq_r16(b, 80)), kq_int(static_cast<int>(packed & 0x0F)));
    add = -kq_mul(kq_half(kq_r16(b, 82)), kq_int(static_cast<int>(packed >> 4)));
  }
};

struct KqQ3_K {
  static constexpr int kValues = 256, kBytes = 110, kStep = 16, kBias = 4;
  static constexpr bool kWide = false, kHasMin = false;
  static KQ_FN void decode8(const unsigned char* b, int j, float* out) {
    const float scale = kq_mul(kq_half(kq_u16(b + 108)), kq_int(kq_q3_scale(b, 96, j / 2)));
    KQ_UNROLL for (int e = 0; e < 8; ++e) {
      const int i = 8 * j + e;
      // A clear high bit subtracts 4: the code is 3 bits, -4..3.
      const int q = kq_two_bits(b + 32, i) - (kq_high_bit(b, i) ? 0 : 4);
      out[e] = kq_mul(scale, kq_int(q));
    }
  }
  // u = two bits + 4 * high bit, so u - 4 is the signed code: step s is step s % 2 of the two
  // runs of steps s - s % 2 (below).
  template <class B>
  static KQ_FN unsigned codes(const B& b, int s, int, int t) {
    const int s0 = s - s % 2;
    return run_codes(KqAt<B>{b, run0(s0)}, KqAt<B>{b, run1(s0)}, s0, s % 2, t);
  }
  template <class B>
  static KQ_FN void scale(const B& b, int s, float& mul, float& add) {
    mul = kq_mul(kq_half(kq_r16(b, 108)), kq_int(kq_q3_scale(b, 96, s)));
    add = 0.0f;
  }
  // A lane's two steps s0, s0 + 1 (s0 even) of the matrix-vector kernel read two runs of 32
  // bytes: their bit pairs from run0(s0), their high bits from run1(s0) (bytes 16 i + 4t of each
  // run for step s0 + i), so with the runs in registers every code is a pick of registers.
  static constexpr bool kLaneRuns = true;
  static KQ_FN int run0(int s0) { return 32 + 32 * (s0 / 8); }
  static KQ_FN int run1(int) { return 0; }
  template <class W>
  static KQ_FN unsigned run_codes(const W& r0, const W& r1, int s0, int i, int t) {
    const unsigned low = (kq_r32(r0, 16 * i + 4 * t) >> (2 * ((s0 % 8) / 2))) & 0x03030303u;
    const unsigned high = (kq_r32(r1, 16 * i + 4 * t) >> (s0 / 2)) & 0x01010101u;
    return low | (high << 2);
  }
};

// Q4_K and Q5_K share the header (d, dmin, packed scales) and differ by the fifth bit.
template <bool kFifth>
struct KqQ45_K {
  static constexpr int kValues = 256, kBytes = kFifth ? 176 : 144, kStep = 32, kBias = 0;
  static constexpr bool kWide = false, kHasMin = true;
  static constexpr int kNibbles = kFifth ? 48 : 16;
  static KQ_FN void decode8(const unsigned char* b, int j, float* out) {
    int packed_scale, packed_min;
    kq_scale_min(b, 4, j / 4, packed_scale, packed_min);
    const float scale = kq_mul(kq_half(kq_u16(b)), kq_int(packed_scale));
    const float min = kq_mul(kq_half(kq_u16(b + 2)), kq_int(packed_min));
    KQ_UNROLL for (int e = 0; e < 8; ++e) {
      const int i = 8 * j + e;
      int q = kq_k_nibble(b + kNibbles, i);
      if constexpr (kFifth) q |= kq_high_bit(b + 16, i) << 4;
      out[e] = kq_sub(kq_mul(scale, kq_int(q)), min);
    }
  }
  // Step j (sub-block j), chunk h: values 32j + 16h + 4t + e, nibble (j odd: high) of bytes
  // 32 (j / 2) + 16h + 4t + e; Q5_K's fifth bit j of bytes 16h + 4t + e of its 32 high bytes.
  template <class B>
  static KQ_FN unsigned codes(const B& b, int j, int h, int t) {
    unsigned u = kq_nibbles(kq_r32(b, kNibbles + 32 * (j / 2) + 16 * h + 4 * t), (j % 2) != 0);
    if constexpr (kFifth) u |= ((kq_r32(b, 16 + 16 * h + 4 * t) >> j) & 0x01010101u) << 4;
    return u;
  }
  template <class B>
  static KQ_FN void scale(const B& b, int j, float& mul, float& add) {
    int packed_scale, packed_min;
    kq_scale_min(b, 4, j, packed_scale, packed_min);
    mul = kq_mul(kq_half(kq_r16(b, 0)), kq_int(packed_scale));
    add = -kq_mul(kq_half(kq_r16(b, 2)), kq_int(packed_min));
  }
};
typedef KqQ45_K<false> KqQ4_K;
typedef KqQ45_K<true> KqQ5_K;

struct KqQ6_K {
  static constexpr int kValues = 256, kBytes = 210, kStep = 16, kBias = 32;
  static constexpr bool kWide = false, kHasMin = false;
  static KQ_FN void decode8(const unsigned char* b, int j, float* out) {
    const float d = kq_half(kq_u16(b + 208));
    const float scale = kq_mul(d, kq_int(static_cast<signed char>(b[192 + j / 2])));
    KQ_UNROLL for (int e = 0; e < 8; ++e) {
      // Each group of 128 values takes 64 low bytes (nibble within / 64 of byte within % 64)
      // and 32 high bytes (bit pair within / 32 of byte within % 32).
      const int i = 8 * j + e, group = i / 128, within = i % 128;
      const int nib = (b[64 * group + within % 64] >> (4 * (within / 64))) & 0x0F;
      const int top = (b[128 + 32 * group + within % 32] >> (2 * (within / 32))) & 3;
      out[e] = kq_mul(scale, kq_int((nib | (top << 4)) - 32));
    }
  }
  // Step s (16 values): nibbles of bytes 64 (s / 8) + 16 (s % 4) + 4t + e, the high (s % 8 >= 4)
  // or low ones; bit pair (s % 8) / 2 of high bytes 128 + 32 (s / 8) + 16 (s % 2) + 4t + e: step
  // s % 2 of the two runs of steps s - s % 2 (below).
  template <class B>
  static KQ_FN unsigned codes(const B& b, int s, int, int t) {
    const int s0 = s - s % 2;
    return run_codes(KqAt<B>{b, run0(s0)}, KqAt<B>{b, run1(s0)}, s0, s % 2, t);
  }
  template <class B>
  static KQ_FN void scale(const B& b, int s, float& mul, float& add) {
    mul = kq_mul(kq_half(kq_r16(b, 208)), kq_int(static_cast<signed char>(kq_r8(b, 192 + s))));
    add = 0.0f;
  }
  // A lane's two steps s0, s0 + 1 (s0 even) of the matrix-vector kernel read two runs of 32
  // bytes: their nibbles from run0(s0), their bit pairs from run1(s0) (bytes 16 i + 4t of each
  // run for step s0 + i), so with the runs in registers every code is a pick of registers.
  static constexpr bool kLaneRuns = true;
  static KQ_FN int run0(int s0) { return 64 * (s0 / 8) + 16 * (s0 % 4); }
  static KQ_FN int run1(int s0) { return 128 + 32 * (s0 / 8); }
  template <class W>
  static KQ_FN unsigned run_codes(const W& r0, const W& r1, int s0, int i, int t) {
    const unsigned low = kq_nibbles(kq_r32(r0, 16 * i + 4 * t), (s0 % 8) >= 4);
    const unsigned top = (kq_r32(r1, 16 * i + 4 * t) >> (2 * ((s0 % 8) / 2))) & 0x03030303u;
    return low | (top << 4);
  }
};

struct KqQ8_K {
  static constexpr int kValues = 256, kBytes = 292, kStep = 32, kBias = 128;
  static constexpr bool kWide = true, kHasMin = false;
  static KQ_FN void decode8(const unsigned char* b, int j, float* out) {
    const float d = kq_f32(b);
    KQ_UNROLL for (int e = 0; e < 8; ++e) out[e] =
        kq_mul(d, kq_int(static_cast<signed char>(b[4 + 8 * j + e])));
  }
  template <class B>
  static KQ_FN unsigned codes(const B& b, int j, int h, int t) {
    return kq_r32(b, 4 + 32 * j + 16 * h + 4 * t) ^ 0x80808080u;
  }
  template <class B>
  static KQ_FN void scale(const B& b, int, float& mul, float& add) {
    mul = kq_bits_f32(kq_r32(b, 0));
    add = 0.0f;
  }
};

// kiln's int8 blocks (Int8Block, Int8Channel): an f32 scale, then the block's int8 codes. The
// block size is the kernel's (run time), so these take the codes and the scale themselves:
// codes(q, t): values 4t .. 4t + 3 of the 16 codes at q.
struct KqInt8 {
  static constexpr int kStep = 16, kBias = 128;
  static constexpr bool kWide = true, kHasMin = false;
  static KQ_FN float decode(const unsigned char* block, long long v) {
    return kq_mul(kq_int(static_cast<signed char>(block[4 + v])), kq_f32(block));
  }
  static KQ_FN unsigned codes(const unsigned char* q, int t) {
    return kq_u32(q + 4 * t) ^ 0x80808080u;
  }
};

// Whether a kind has the matrix-vector kernel's run reading (kLaneRuns: KqQ3_K, KqQ6_K).
template <class Kind, class = void>
struct KqLaneRuns {
  static constexpr bool value = false;
};
template <class Kind>
struct KqLaneRuns<Kind, decltype(void(Kind::kLaneRuns))> {
  static constexpr bool value = Kind::kLaneRuns;
};

// ---- x as the tensor cores take it ----
// An f32 value as three bf16 parts with hi + mid + lo == v exactly for |v| >= 2^-100 (smaller
// values lose what falls below f32's normal range, under 2^-132): the leading 16 bits of a float
// are a bf16 holding its leading 8 significant bits; what they leave is exact in f32 and has at
// most 16 significant bits, the same again leaves at most 8. NaN and infinity are hi alone (a NaN
// whose payload sits in the low bits would truncate to infinity: hi is then the quiet NaN).
KQ_FN void kq_split3(float v, unsigned short* parts) {
  const unsigned bits = kq_f32_bits(v);
  parts[0] = static_cast<unsigned short>(bits >> 16);
  parts[1] = parts[2] = 0;
  if (v != v) {
    parts[0] = 0x7FC0;
  } else if ((bits & 0x7F800000u) != 0x7F800000u) {
    const float r1 = kq_sub(v, kq_bits_f32(bits & 0xFFFF0000u));
    const unsigned b1 = kq_f32_bits(r1);
    parts[1] = static_cast<unsigned short>(b1 >> 16);
    const float r2 = kq_sub(r1, kq_bits_f32(b1 & 0xFFFF0000u));
    parts[2] = static_cast<unsigned short>(kq_f32_bits(r2) >> 16);
  }
}

// ---- 16-bit operands of the tensor-core product ----
#ifndef __CUDACC_RTC__
// PTX's prmt (CUDA's __byte_perm) in its default mode: byte i of the result is byte
// (s >> 4i) & 7 of the 8 bytes y:x.
KQ_FN unsigned kq_byte_perm(unsigned x, unsigned y, unsigned s) {
  const unsigned long long bytes = (static_cast<unsigned long long>(y) << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i)
    r |= static_cast<unsigned>((bytes >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
}
inline float kq_elem_to_float(unsigned bits, bool bf16) {
  return bf16 ? bf16_bits_to_float(static_cast<std::uint16_t>(bits))
              : f16_bits_to_float(static_cast<std::uint16_t>(bits));
}
inline unsigned kq_float_to_elem(float v, bool bf16) {
  return bf16 ? float_to_bf16_bits(v) : float_to_f16_bits(v);
}
#else
KQ_FN unsigned kq_byte_perm(unsigned x, unsigned y, unsigned s) { return __byte_perm(x, y, s); }
#endif

// a * b + c on two 16-bit floats at once (fma.rn.{f16,bf16}x2; exact here: small integers).
template <bool kBf16>
KQ_FN unsigned kq_fma2(unsigned a, unsigned b, unsigned c) {
#ifdef __CUDACC_RTC__
  unsigned r;
  if constexpr (kBf16) {
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  } else {
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  }
  return r;
#else
  unsigned r = 0;
  for (int i = 0; i < 2; ++i) {
    const float v = kq_elem_to_float((a >> (16 * i)) & 0xFFFF, kBf16) *
                        kq_elem_to_float((b >> (16 * i)) & 0xFFFF, kBf16) +
                    kq_elem_to_float((c >> (16 * i)) & 0xFFFF, kBf16);
    r |= kq_float_to_elem(v, kBf16) << (16 * i);
  }
  return r;
#endif
}

// Four codes u (byte e of u4) as u - kBias in 16-bit floats: lo holds e = 0 (low half) and 1, hi
// e = 2 and 3. A code below 1024 in the mantissa of 1024.0 (f16 0x6400 | u) is 1024 + u, and one
// below 128 in that of bf16's 128.0 (0x4300 | u) is 128 + u: one fused multiply-add on both
// halves subtracts the base and the bias exactly. bf16 cannot hold an 8-bit code that way, so
// wide codes go through f32 (0x4B000000 | u is 2^23 + u), whose upper half is then the bf16
// value exactly (a code needs at most 8 significant bits).
template <bool kBf16, bool kWide, int kBias>
KQ_FN void kq_pack(unsigned u4, unsigned& lo, unsigned& hi) {
  if constexpr (kBf16 && kWide) {
    const float base = 8388608.0f + static_cast<float>(kBias);
    float f[4];
#ifdef __CUDACC_RTC__
    KQ_UNROLL for (int e = 0; e < 4; ++e) f[e] =
        __uint_as_float(kq_byte_perm(u4, 0x4B00u, 0x5440u | e)) - base;
    const unsigned w0 = __float_as_uint(f[0]), w1 = __float_as_uint(f[1]);
    const unsigned w2 = __float_as_uint(f[2]), w3 = __float_as_uint(f[3]);
#else
    unsigned w[4];
    for (int e = 0; e < 4; ++e) {
      const unsigned magic = kq_byte_perm(u4, 0x4B00u, 0x5440u | static_cast<unsigned>(e));
      std::memcpy(&f[e], &magic, 4);
      f[e] -= base;
      std::memcpy(&w[e], &f[e], 4);
    }
    const unsigned w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
#endif
    lo = kq_byte_perm(w0, w1, 0x7632u);
    hi = kq_byte_perm(w2, w3, 0x7632u);
  } else {
    const unsigned magic = kBf16 ? 0x4343u : 0x6464u;
    const unsigned one = kBf16 ? 0x3F803F80u : 0x3C003C00u;
    const unsigned base =
        (kBf16 ? 0xC300u : 0xE400u) | static_cast<unsigned>(kBias);  // -(base + bias)
    lo = kq_fma2<kBf16>(kq_byte_perm(u4, magic, 0x5140u), one, base | (base << 16));
    hi = kq_fma2<kBf16>(kq_byte_perm(u4, magic, 0x5342u), one, base | (base << 16));
  }
}

// Lane (g, t)'s A fragment of chunk h of a step: rows g (block b0) and g + 8 (block b1) of a
// 16-row tile, k slots (2t, 2t + 1) in a[0] (row g) and a[1] (row g + 8), (2t + 8, 2t + 9) in a[2]
// and a[3] (PTX's m16n8k16 layout), holding values 4t .. 4t + 3 of the chunk.
template <class Kind, bool kBf16, class B>
KQ_FN void kq_a_fragment(const B& b0, const B& b1, int step, int h, int t, unsigned* a) {
  kq_pack<kBf16, Kind::kWide, Kind::kBias>(Kind::codes(b0, step, h, t), a[0], a[2]);
  kq_pack<kBf16, Kind::kWide, Kind::kBias>(Kind::codes(b1, step, h, t), a[1], a[3]);
}

// The step's sums into the accumulators: c[0], c[1] are row g's (columns 2t, 2t + 1), c[2], c[3]
// row g + 8's; codes holds sum (u - bias) x, xsum sum x (kinds with a minimum only).
template <bool kHasMin>
KQ_FN void kq_apply(float* acc, const float* codes, const float* xsum, float mul0, float add0,
                    float mul1, float add1) {
  acc[0] += mul0 * codes[0];
  acc[1] += mul0 * codes[1];
  acc[2] += mul1 * codes[2];
  acc[3] += mul1 * codes[3];
  if constexpr (kHasMin) {
    acc[0] += add0 * xsum[0];
    acc[1] += add0 * xsum[1];
    acc[2] += add1 * xsum[2];
    acc[3] += add1 * xsum[3];
  }
}

}  // namespace kiln::cuda::quant_blocks

#endif  // KILN_CUDA_QUANT_BLOCKS_H
