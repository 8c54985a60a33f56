// Decoding GGUF's 256-value k-quant blocks. Each value is computed as llama.cpp's reference
// does it: the sub-block's scale (and min) multiplied out first, then one product and one
// difference per value, without FMA contraction, so results match it bit for bit.
#include "quant/blocks.h"
#include "quant/kernels.h"

namespace kiln::quant {
namespace {

constexpr int kValues = 256;

// Value i's two bits in a 64-byte field where each group of 128 values uses 32 bytes, bit pair
// s of byte l holding value 32 * s + l of the group (Q2_K and Q3_K's low bits).
inline int two_bits(const std::byte* qs, int i) noexcept {
  const int group = i / 128;
  const int within = i % 128;
  return (byte_at(qs, 32 * group + within % 32) >> (2 * (within / 32))) & 3;
}
// Value i's bit in a 32-byte field: bit i / 32 of byte i % 32 (Q3_K and Q5_K's high bits).
inline int high_bit(const std::byte* bits, int i) noexcept {
  return (byte_at(bits, i % 32) >> (i / 32)) & 1;
}
// Value i's nibble in a 128-byte field where each group of 64 values uses 32 bytes, the low
// nibbles holding its first 32 values (Q4_K and Q5_K).
inline int k_nibble(const std::byte* qs, int i) noexcept {
  const std::uint8_t b = byte_at(qs, 32 * (i / 64) + i % 32);
  return (i % 64) < 32 ? (b & 0x0F) : (b >> 4);
}

// Q3_K's sixteen 6-bit scales: low nibbles from bytes 0-7 (sub-blocks 0-7 the low halves, 8-15
// the high halves), top two bits from bytes 8-11 (bit pair j / 4 of byte 8 + j % 4).
inline int q3_scale(const std::byte* packed, int j) noexcept {
  const int low = (byte_at(packed, j % 8) >> (4 * (j / 8))) & 0x0F;
  const int high = (byte_at(packed, 8 + j % 4) >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

}  // namespace

void dequantize_q2_k(const std::byte* in, std::int64_t blocks, float* out) {
  for (std::int64_t b = 0; b < blocks; ++b, in += 84, out += kValues) {
    const float d = load_f16(in + 80);
    const float dmin = load_f16(in + 82);
    for (int sub = 0; sub < 16; ++sub) {
      const std::uint8_t packed = byte_at(in, sub);
      const float scale = d * static_cast<float>(packed & 0x0F);
      const float min = dmin * static_cast<float>(packed >> 4);
      for (int i = 16 * sub; i < 16 * sub + 16; ++i)
        out[i] = scale * static_cast<float>(two_bits(in + 16, i)) - min;
    }
  }
}

void dequantize_q3_k(const std::byte* in, std::int64_t blocks, float* out) {
  for (std::int64_t b = 0; b < blocks; ++b, in += 110, out += kValues) {
    const float d = load_f16(in + 108);
    for (int sub = 0; sub < 16; ++sub) {
      const float scale = d * static_cast<float>(q3_scale(in + 96, sub));
      for (int i = 16 * sub; i < 16 * sub + 16; ++i) {
        // A clear high bit subtracts 4: the code is 3 bits, -4..3.
        const int q = two_bits(in + 32, i) - (high_bit(in, i) ? 0 : 4);
        out[i] = scale * static_cast<float>(q);
      }
    }
  }
}

namespace {

// Q4_K and Q5_K share the header (d, dmin, packed scales) and differ by the fifth bit.
template <bool kFifthBit>
void dequantize_q45_k(const std::byte* in, std::int64_t blocks, float* out) {
  constexpr std::int64_t kBytes = kFifthBit ? 176 : 144;
  for (std::int64_t b = 0; b < blocks; ++b, in += kBytes, out += kValues) {
    const float d = load_f16(in);
    const float dmin = load_f16(in + 2);
    const std::byte* nibbles = in + (kFifthBit ? 48 : 16);
    for (int sub = 0; sub < 8; ++sub) {
      int packed_scale;
      int packed_min;
      scale_min(in + 4, sub, packed_scale, packed_min);
      const float scale = d * static_cast<float>(packed_scale);
      const float min = dmin * static_cast<float>(packed_min);
      for (int i = 32 * sub; i < 32 * sub + 32; ++i) {
        int q = k_nibble(nibbles, i);
        if constexpr (kFifthBit) q |= high_bit(in + 16, i) << 4;
        out[i] = scale * static_cast<float>(q) - min;
      }
    }
  }
}

}  // namespace

void dequantize_q4_k(const std::byte* in, std::int64_t blocks, float* out) {
  dequantize_q45_k<false>(in, blocks, out);
}

void dequantize_q5_k(const std::byte* in, std::int64_t blocks, float* out) {
  dequantize_q45_k<true>(in, blocks, out);
}

void dequantize_q6_k(const std::byte* in, std::int64_t blocks, float* out) {
  for (std::int64_t b = 0; b < blocks; ++b, in += 210, out += kValues) {
    const std::byte* low = in;
    const std::byte* high = in + 128;
    const float d = load_f16(in + 208);
    for (int i = 0; i < kValues; ++i) {
      // Each group of 128 values takes 64 low bytes (nibble i / 64 of byte i % 64) and 32 high
      // bytes (bit pair i / 32 of byte i % 32), counted within the group.
      const int group = i / 128;
      const int within = i % 128;
      const int nib = (byte_at(low, 64 * group + within % 64) >> (4 * (within / 64))) & 0x0F;
      const int top = (byte_at(high, 32 * group + within % 32) >> (2 * (within / 32))) & 3;
      const float scale = d * static_cast<float>(static_cast<std::int8_t>(in[192 + i / 16]));
      out[i] = scale * static_cast<float>((nib | (top << 4)) - 32);
    }
  }
}

void dequantize_q8_k(const std::byte* in, std::int64_t blocks, float* out) {
  for (std::int64_t b = 0; b < blocks; ++b, in += 292, out += kValues) {
    const float d = load_f32(in);
    for (int i = 0; i < kValues; ++i)
      out[i] = d * static_cast<float>(static_cast<std::int8_t>(in[4 + i]));
  }
}

}  // namespace kiln::quant
