// Scaled dot-product attention as one generated kernel (flash attention: cuda_attention.cpp runs
// it, attention_source.cpp writes its entry around the body in attention_kernels.h, which says
// how it works). The [Sq, Sk] matrix never exists; a row whose every key is excluded gives zeros,
// a NaN score a NaN row, as the default.
#pragma once

#include <cstdint>
#include <string>

#include "backends/cuda/attention_kernels.h"
#include "kiln/dtype.h"

namespace kiln::cuda {

inline constexpr int kAttentionRows = attention_kernels::kKaRows;  // query rows per block
inline constexpr int kAttentionThreads = attention_kernels::kKaThreads;
using AttentionParams = attention_kernels::KaParams;

// True where the kernel runs attention of dtype with head dim `depth` (bf16 or f16; depth a
// multiple of 16 up to 128).
bool attention_kernel_applies(DType dtype, std::int64_t depth);
// The kernel's source: inputs of dtype, head dim depth, with a mask (bool) and a bias (of dtype)
// or without.
std::string attention_kernel_source(DType dtype, std::int64_t depth, bool mask, bool bias);
// Dynamic shared memory of the kernel for head dim depth.
unsigned attention_shared_bytes(std::int64_t depth);

}  // namespace kiln::cuda
