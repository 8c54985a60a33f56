// int8 × int8 products with int32 accumulation on the tensor cores, through cuBLASLt (its IMMA
// kernels; on Hopper the wgmma ones), on raw device pointers: the core of a product of two
// tensors in kiln's symmetric int8 schemes, whose scales then multiply the exact int32 sums
// (x = dx · qx, w = dw · qw: y = dx · dw · Σ qx qw).
//   C[m, n] = A[m, k] · B[n, k]ᵀ     A, B int8, row-major (row strides lda, ldb); C int32 (ldc)
// which is cuBLASLt's "TN" form in its column-major terms (Cᵀ = B · Aᵀ), the one its int8
// kernels take. Sums of k products of int8 values are exact in int32 for k up to 2^17.
//
//   Int8MatmulDesc d{.m = m, .n = n, .k = k, .lda = k, .ldb = k, .ldc = n};
//   if (int8_matmul_supported(d, &why)) int8_matmul(d, a, b, c, stream);   // asynchronous
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace kiln::cuda::lib {

struct Int8MatmulDesc {
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  std::int64_t lda = 0;  // elements between rows of A (>= k)
  std::int64_t ldb = 0;  // of B (>= k)
  std::int64_t ldc = 0;  // of C (>= n)
};

// Whether cuBLASLt's int8 kernels take d: n, k and the leading dims multiples of 4, k at most
// 2^17 (sums exact in int32), leading dims no smaller than the rows they step over. The reason in
// *why otherwise.
[[nodiscard]] bool int8_matmul_supported(const Int8MatmulDesc& d, std::string* why = nullptr);

// Runs the product on stream (the current device's); a, b and c 16-byte aligned. Throws
// InvalidArgument when !int8_matmul_supported(d) or a pointer is misaligned, UnsupportedOperation
// where cuBLASLt has no algorithm for it, ExecutionError / OutOfMemory from CUDA and cuBLASLt.
void int8_matmul(const Int8MatmulDesc& d, const void* a, const void* b, void* c,
                 cudaStream_t stream);

}  // namespace kiln::cuda::lib
