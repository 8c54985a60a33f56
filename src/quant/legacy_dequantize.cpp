// Decoding GGUF's 32-value blocks. Each value is one float product (and one sum for the kinds
// with a minimum), in the order llama.cpp's reference uses, so results match it bit for bit;
// this directory is compiled without FMA contraction, which would round differently.
#include "quant/blocks.h"
#include "quant/kernels.h"

namespace kiln::quant {
namespace {

constexpr int kValues = 32;
constexpr int kHalf = kValues / 2;

// Value j of a block's nibbles: j < 16 in the low half of byte j, else the high half of j - 16.
inline int nibble(const std::byte* qs, int j) noexcept {
  const std::uint8_t b = byte_at(qs, j % kHalf);
  return j < kHalf ? (b & 0x0F) : (b >> 4);
}

}  // namespace

void dequantize_q4_0(const std::byte* in, std::int64_t blocks, float* out) {
  for (std::int64_t b = 0; b < blocks; ++b, in += 18, out += kValues) {
    const float d = load_f16(in);
    for (int j = 0; j < kValues; ++j) out[j] = static_cast<float>(nibble(in + 2, j) - 8) * d;
  }
}

void dequantize_q4_1(const std::byte* in, std::int64_t blocks, float* out) {
  for (std::int64_t b = 0; b < blocks; ++b, in += 20, out += kValues) {
    const float d = load_f16(in);
    const float m = load_f16(in + 2);
    for (int j = 0; j < kValues; ++j) out[j] = static_cast<float>(nibble(in + 4, j)) * d + m;
  }
}

void dequantize_q5_0(const std::byte* in, std::int64_t blocks, float* out) {
  for (std::int64_t b = 0; b < blocks; ++b, in += 22, out += kValues) {
    const float d = load_f16(in);
    const std::uint32_t high = load_u32(in + 2);
    for (int j = 0; j < kValues; ++j) {
      const int q = nibble(in + 6, j) | static_cast<int>(((high >> j) & 1u) << 4);
      out[j] = static_cast<float>(q - 16) * d;
    }
  }
}

void dequantize_q5_1(const std::byte* in, std::int64_t blocks, float* out) {
  for (std::int64_t b = 0; b < blocks; ++b, in += 24, out += kValues) {
    const float d = load_f16(in);
    const float m = load_f16(in + 2);
    const std::uint32_t high = load_u32(in + 4);
    for (int j = 0; j < kValues; ++j) {
      const int q = nibble(in + 8, j) | static_cast<int>(((high >> j) & 1u) << 4);
      out[j] = static_cast<float>(q) * d + m;
    }
  }
}

void dequantize_q8_0(const std::byte* in, std::int64_t blocks, float* out) {
  for (std::int64_t b = 0; b < blocks; ++b, in += 34, out += kValues) {
    const float d = load_f16(in);
    for (int j = 0; j < kValues; ++j)
      out[j] = static_cast<float>(static_cast<std::int8_t>(in[2 + j])) * d;
  }
}

}  // namespace kiln::quant
