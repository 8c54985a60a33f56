// The epilogue as its own pass over C, for what cuBLASLt does not fuse: kiln's exact (erf) gelu,
// an epilogue cuBLASLt has no algorithm for (e.g. with f64), and k = 0 (C = act(bias) or 0).
// Internal to kiln_cuda_lib (matmul.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/lib/matmul.h"

namespace kiln::cuda::lib {

enum class Activation : std::uint8_t { None, Relu, Gelu, GeluTanh };

// C[b, i, j] = act((zero_first ? 0 : C[b, i, j]) + (bias ? bias[j] : 0)) for the m×n matrices
// of desc.c, asynchronously on stream.
void apply_epilogue(const MatmulDesc& desc, void* c, const void* bias, Activation activation,
                    bool zero_first, cudaStream_t stream);

}  // namespace kiln::cuda::lib
