// The block kernels behind QFloat data: one decoder per QuantScheme kind, and encoders for the
// kinds kiln can write. The byte layouts are documented in <kiln/quant.h>.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kiln/half.h"
#include "kiln/options.h"

namespace kiln::quant {

static_assert(std::endian::native == std::endian::little,
              "GGUF blocks are little-endian and are read without byte swapping");

// Values and bytes of one block. Int8Channel's block is one row, so its size comes from the row.
struct BlockSize {
  std::int64_t values;
  std::int64_t bytes;
};
BlockSize block_size(const QuantScheme& scheme, std::int64_t row_length) noexcept;

// Decodes `blocks` consecutive blocks of `block.values` values each into out.
void dequantize_blocks(QuantScheme::Kind kind, BlockSize block, const std::byte* in,
                       std::int64_t blocks, float* out);
// Encodes `blocks` blocks of finite values; the kind must satisfy can_quantize.
void quantize_blocks(QuantScheme::Kind kind, BlockSize block, const float* in, std::int64_t blocks,
                     std::byte* out);

inline float load_f16(const std::byte* p) noexcept {
  std::uint16_t bits;
  std::memcpy(&bits, p, 2);
  return f16_bits_to_float(bits);
}
inline void store_f16(std::byte* p, float value) noexcept {
  const std::uint16_t bits = float_to_f16_bits(value);
  std::memcpy(p, &bits, 2);
}
inline float load_f32(const std::byte* p) noexcept {
  float value;
  std::memcpy(&value, p, 4);
  return value;
}
inline std::uint32_t load_u32(const std::byte* p) noexcept {
  std::uint32_t value;
  std::memcpy(&value, p, 4);
  return value;
}
inline std::uint8_t byte_at(const std::byte* p, std::int64_t i) noexcept {
  return static_cast<std::uint8_t>(p[i]);
}

// The 6-bit scale and min of sub-block j (of 8) packed in Q4_K and Q5_K's 12 bytes: the first
// four whole in the low six bits of bytes 0-3 and 4-7, the last four split between the nibbles
// of bytes 8-11 and the top two bits of bytes 0-7.
inline void scale_min(const std::byte* packed, int j, int& scale, int& min) noexcept {
  if (j < 4) {
    scale = byte_at(packed, j) & 63;
    min = byte_at(packed, j + 4) & 63;
  } else {
    scale = (byte_at(packed, j + 4) & 0x0F) | ((byte_at(packed, j - 4) >> 6) << 4);
    min = (byte_at(packed, j + 4) >> 4) | ((byte_at(packed, j) >> 6) << 4);
  }
}

}  // namespace kiln::quant
