// Scaled dot-product attention as one generated kernel (flash attention: cuda_attention.cpp runs
// it, attention_source.cpp writes it). A block of 4 warps takes 64 query rows of one (batch,
// head); each warp keeps its 16 rows of q in registers and walks the keys 64 at a time:
// scores = q kᵀ on the tensor cores (mma.sync m16n8k16, f32 accumulators), the scale, bias,
// mask and causal cut applied in registers, the running maximum and sum updated (online
// softmax, in base 2), and the weights, rounded to the input type, multiplied into v on the
// tensor cores. K and v tiles come through shared memory with asynchronous copies, v's while the
// scores are computed and the next k's while the weights meet v. The [Sq, Sk] matrix never
// exists; a row whose every key is excluded gives zeros, a NaN score a NaN row, as the default.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/dtype.h"

namespace kiln::cuda {

inline constexpr int kAttentionRows = 64;  // query rows per block
inline constexpr int kAttentionThreads = 128;

// Mirrors struct P of the generated source: same members, same order.
struct AttentionParams {
  std::uint64_t q, k, v, out, mask, bias;  // mask, bias: 0 when absent
  // Element strides over (batch, head, row) of q, k and v (the last dim is contiguous), and over
  // (batch, head, query, key) of mask and bias; 0 along a broadcast dim.
  std::int64_t q_strides[3], k_strides[3], v_strides[3];
  std::int64_t mask_strides[4], bias_strides[4];
  std::int64_t batch, heads, queries, keys, query_blocks;
  float scale_log2;  // the scale times log2(e)
  std::int32_t causal;
};

// True where the kernel runs attention of dtype with head dim `depth` (bf16 or f16; depth a
// multiple of 16 up to 128).
bool attention_kernel_applies(DType dtype, std::int64_t depth);
// The kernel's source: inputs of dtype, head dim depth, with a mask (bool) and a bias (of dtype)
// or without.
std::string attention_kernel_source(DType dtype, std::int64_t depth, bool mask, bool bias);

}  // namespace kiln::cuda
