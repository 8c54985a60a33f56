// Quantized storage: the QuantScheme of a QFloat TensorData and the sizes it implies.
//
//   QuantScheme q8 = quant_scheme(QuantScheme::Kind::Q8_0);   // GGUF's Q8_0, 32 values a block
//   QuantScheme rows = int8_channel_scheme();                  // one f32 scale per row
//   TensorData q = TensorData::from_vec(values, {4096, 4096}).quantize(q8);
//   quantized_bytes(q.shape(), q8) == q.bytes().size();         // 4096 * 4096 / 32 * 34
//
// Block layouts, little-endian, f16 meaning IEEE binary16 (llama.cpp's ggml names and bytes):
//   Q4_0  32 values, 18 bytes: f16 d, 16 bytes of 4-bit q (value j in the low nibble of byte j,
//         value j + 16 in its high nibble); x = d * (q - 8)
//   Q4_1  32 values, 20 bytes: f16 d, f16 m, 16 bytes as Q4_0; x = d * q + m
//   Q5_0  32 values, 22 bytes: f16 d, u32 high bits (bit j is bit 4 of value j), nibbles as
//         Q4_0; x = d * (q - 16)
//   Q5_1  32 values, 24 bytes: f16 d, f16 m, u32 high bits, nibbles; x = d * q + m
//   Q8_0  32 values, 34 bytes: f16 d, 32 int8 q; x = d * q
//   Q2_K  256 values, 84 bytes: 16 bytes of 4-bit scale | 4-bit min per 16 values, 64 bytes of
//         2-bit q, f16 d, f16 dmin; x = d * scale * q - dmin * min
//   Q3_K  256 values, 110 bytes: 32 bytes of high bits, 64 bytes of 2-bit q, 12 bytes of 6-bit
//         scales, f16 d; x = d * (scale - 32) * (q - 4 * !high)
//   Q4_K  256 values, 144 bytes: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins per 32
//         values, 128 bytes of nibbles; x = d * scale * q - dmin * min
//   Q5_K  256 values, 176 bytes: as Q4_K with 32 bytes of fifth bits before the nibbles
//   Q6_K  256 values, 210 bytes: 128 bytes of low nibbles, 64 bytes of high 2 bits, 16 int8
//         scales, f16 d; x = d * scale * (q - 32)
//   Q8_K  256 values, 292 bytes: f32 d, 256 int8 q, 16 int16 block sums; x = d * q
//   Int8Block    block_size values, 4 + block_size bytes: f32 d, int8 q; x = d * q
//   Int8Channel  one block per row of the last dim, laid out as Int8Block
// kiln's int8 encoders are symmetric: d = max|x| / 127 and q = round(x / d), halves away from
// zero, as ggml encodes Q8_0. Q4_K and Q6_K are encoded with llama.cpp's reference algorithms (a
// search for each sub-block's scale, and min, by weighted squared error; then each value's
// nearest code under the scales it decodes with); their bytes may differ from llama.cpp's where
// the searches' float sums round differently. Blocks run along the last (innermost) dim, row
// after row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kiln/options.h"
#include "kiln/shape.h"

namespace kiln {

// The scheme of a GGUF block kind, or Int8Channel; InvalidArgument for Int8Block, whose block
// size is the caller's (int8_block_scheme).
[[nodiscard]] QuantScheme quant_scheme(QuantScheme::Kind kind);
// Symmetric int8 with one f32 scale per block_size values; InvalidArgument unless
// 1 <= block_size <= 2^20.
[[nodiscard]] QuantScheme int8_block_scheme(std::int64_t block_size);
// Symmetric int8 with one f32 scale per row of the last dim.
[[nodiscard]] QuantScheme int8_channel_scheme();

// "Q4_0", ..., "Q8_K", "int8_block", "int8_channel".
std::string_view quant_kind_name(QuantScheme::Kind kind) noexcept;
// Checks a scheme's fields (a kind kiln knows, the block size that kind needs); InvalidArgument
// naming op and the values otherwise.
void check_quant_scheme(const QuantScheme& scheme, std::string_view op);
// The bytes that QFloat data of shape takes in scheme. ShapeMismatch for a scalar shape or a last
// dim that is not a whole number of blocks, OutOfMemory past kiln's size limits.
[[nodiscard]] std::size_t quantized_bytes(const Shape& shape, const QuantScheme& scheme,
                                          std::string_view op = "quantized_bytes");
// True where kiln can encode float values in scheme: all but Q2_K, Q3_K, Q5_K and Q8_K, which it
// only decodes.
[[nodiscard]] bool can_quantize(const QuantScheme& scheme) noexcept;

}  // namespace kiln
