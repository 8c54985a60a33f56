// Products with a thin side, run by kernels of kiln's own instead of cuBLASLt: at most 16 columns
// (a classifier's last layer, x[4096, 512] · w[512, 10], and its weight's gradient
// h[4096, 512]ᵀ · dy[4096, 10]) or a sum over at most 16 terms (the gradient that layer sends
// back, dy · wᵀ). cuBLASLt tiles them like any product: 128 tiles of 32 x 32 walking k serially
// took about 20 us at Nsight Compute's clocks for what is one pass over 8 MB (an H100,
// docs/cuda-backend-notes.md, session 62). Here B's tile is staged in shared memory, laid out so
// that a warp reads consecutive words, and A is read once, coalesced; k is split over blocks where
// the rows are too few to fill the GPU, and the splits' partial sums are added in a fixed order by
// a second kernel, so the result does not depend on scheduling. Sums accumulate in float (double
// for f64), as cuBLASLt's do. Internal to kiln_cuda_lib (matmul.cpp). Experimental, off by default:
// KILN_CUDA_SKINNY=1 turns them on. A first version was right and slower than cuBLASLt on an H100;
// this one, written after it, has not yet run on a GPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "backends/cuda/lib/matmul.h"

namespace kiln::cuda::lib {

// Whether these kernels take desc (k > 0): n <= 16 with A's rows or columns contiguous, or
// k <= 16 with C's rows contiguous; at most 65535 matrices in the batch; KILN_CUDA_SKINNY=1.
// Every epilogue, alpha, beta and addend is taken.
[[nodiscard]] bool skinny_product(const MatmulDesc& desc);

// Runs desc (skinny_product(desc) holds) on stream, on the current device of sms SMs. workspace
// (workspace_bytes of device memory, used by nothing else on stream meanwhile) holds the partial
// sums when k is split.
void skinny_matmul(const MatmulDesc& desc, const MatmulArgs& args, void* workspace,
                   std::size_t workspace_bytes, int sms, cudaStream_t stream);

}  // namespace kiln::cuda::lib
