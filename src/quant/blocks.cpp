// One place that maps a scheme's kind to its block size and kernels.
#include "quant/blocks.h"

#include "quant/kernels.h"

namespace kiln::quant {

BlockSize block_size(const QuantScheme& scheme, std::int64_t row_length) noexcept {
  using Kind = QuantScheme::Kind;
  switch (scheme.kind) {
    case Kind::Q4_0:
      return {32, 18};
    case Kind::Q4_1:
      return {32, 20};
    case Kind::Q5_0:
      return {32, 22};
    case Kind::Q5_1:
      return {32, 24};
    case Kind::Q8_0:
      return {32, 34};
    case Kind::Q2_K:
      return {256, 84};
    case Kind::Q3_K:
      return {256, 110};
    case Kind::Q4_K:
      return {256, 144};
    case Kind::Q5_K:
      return {256, 176};
    case Kind::Q6_K:
      return {256, 210};
    case Kind::Q8_K:
      return {256, 292};
    case Kind::Int8Block:
      return {scheme.block_size, 4 + scheme.block_size};
    case Kind::Int8Channel:
      return {row_length, 4 + row_length};
  }
  return {0, 0};
}

void dequantize_blocks(QuantScheme::Kind kind, BlockSize block, const std::byte* in,
                       std::int64_t blocks, float* out) {
  using Kind = QuantScheme::Kind;
  switch (kind) {
    case Kind::Q4_0:
      return dequantize_q4_0(in, blocks, out);
    case Kind::Q4_1:
      return dequantize_q4_1(in, blocks, out);
    case Kind::Q5_0:
      return dequantize_q5_0(in, blocks, out);
    case Kind::Q5_1:
      return dequantize_q5_1(in, blocks, out);
    case Kind::Q8_0:
      return dequantize_q8_0(in, blocks, out);
    case Kind::Q2_K:
      return dequantize_q2_k(in, blocks, out);
    case Kind::Q3_K:
      return dequantize_q3_k(in, blocks, out);
    case Kind::Q4_K:
      return dequantize_q4_k(in, blocks, out);
    case Kind::Q5_K:
      return dequantize_q5_k(in, blocks, out);
    case Kind::Q6_K:
      return dequantize_q6_k(in, blocks, out);
    case Kind::Q8_K:
      return dequantize_q8_k(in, blocks, out);
    case Kind::Int8Block:
    case Kind::Int8Channel:
      return dequantize_int8(in, blocks, block.values, out);
  }
}

void quantize_blocks(QuantScheme::Kind kind, BlockSize block, const float* in, std::int64_t blocks,
                     std::byte* out) {
  using Kind = QuantScheme::Kind;
  switch (kind) {
    case Kind::Q4_0:
      return quantize_q4_0(in, blocks, out);
    case Kind::Q4_1:
      return quantize_q4_1(in, blocks, out);
    case Kind::Q5_0:
      return quantize_q5_0(in, blocks, out);
    case Kind::Q5_1:
      return quantize_q5_1(in, blocks, out);
    case Kind::Q8_0:
      return quantize_q8_0(in, blocks, out);
    case Kind::Q4_K:
      return quantize_q4_k(in, blocks, out);
    case Kind::Q6_K:
      return quantize_q6_k(in, blocks, out);
    case Kind::Int8Block:
    case Kind::Int8Channel:
      return quantize_int8(in, blocks, block.values, out);
    default:
      return;  // Q2_K, Q3_K, Q5_K, Q8_K: can_quantize is false, and callers check it
  }
}

}  // namespace kiln::quant
