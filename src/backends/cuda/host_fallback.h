// The one explicit host fallback of the CUDA backend: REQUIRED ops that have no GPU kernel yet
// copy their tensor inputs to the CPU backend, run its op there and copy the results back.
// kHostFallbackOps lists exactly those ops, so what is not on the GPU yet is written down in one
// place (and `kiln info`, tests and release notes can print it). Each entry is removed when its
// kernel lands (matmul: cuBLASLt; sort/scans: CUB; conv: im2col / col2im + cuBLASLt).
#pragma once

#include <span>
#include <string_view>

namespace kiln::cuda {

inline constexpr std::string_view kHostFallbackOps[] = {
    "scatter",  // needs atomics per update mode and dtype
    "avg_pool", "avg_pool_backward", "adaptive_avg_pool", "adaptive_avg_pool_backward",
    "max_pool_with_indices", "max_pool_with_indices_backward",
    "interpolate", "interpolate_backward",
};

}  // namespace kiln::cuda
