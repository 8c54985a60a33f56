// The per-kind block kernels that blocks.cpp dispatches to. Each decodes (or encodes) `blocks`
// whole blocks; the sizes were checked by the caller.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::quant {

// 32-value blocks.
void dequantize_q4_0(const std::byte* in, std::int64_t blocks, float* out);
void dequantize_q4_1(const std::byte* in, std::int64_t blocks, float* out);
void dequantize_q5_0(const std::byte* in, std::int64_t blocks, float* out);
void dequantize_q5_1(const std::byte* in, std::int64_t blocks, float* out);
void dequantize_q8_0(const std::byte* in, std::int64_t blocks, float* out);
void quantize_q4_0(const float* in, std::int64_t blocks, std::byte* out);
void quantize_q4_1(const float* in, std::int64_t blocks, std::byte* out);
void quantize_q5_0(const float* in, std::int64_t blocks, std::byte* out);
void quantize_q5_1(const float* in, std::int64_t blocks, std::byte* out);
void quantize_q8_0(const float* in, std::int64_t blocks, std::byte* out);

// 256-value k-quant blocks.
void dequantize_q2_k(const std::byte* in, std::int64_t blocks, float* out);
void dequantize_q3_k(const std::byte* in, std::int64_t blocks, float* out);
void dequantize_q4_k(const std::byte* in, std::int64_t blocks, float* out);
void dequantize_q5_k(const std::byte* in, std::int64_t blocks, float* out);
void dequantize_q6_k(const std::byte* in, std::int64_t blocks, float* out);
void dequantize_q8_k(const std::byte* in, std::int64_t blocks, float* out);
void quantize_q4_k(const float* in, std::int64_t blocks, std::byte* out);
void quantize_q6_k(const float* in, std::int64_t blocks, std::byte* out);

// kiln's int8 blocks: an f32 scale and `values` int8 values each.
void dequantize_int8(const std::byte* in, std::int64_t blocks, std::int64_t values, float* out);
void quantize_int8(const float* in, std::int64_t blocks, std::int64_t values, std::byte* out);

}  // namespace kiln::quant
