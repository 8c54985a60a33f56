// Batched matrix products on raw device pointers through cuBLASLt:
//   C[b] = act(A[b] · B[b] + bias)      A[b]: m×k, B[b]: k×n, C[b]: m×n, bias: n (per column)
// or, without an epilogue, C[b] = alpha · A[b] · B[b] + beta · addend[b] (MatmulArgs).
// Every matrix is given by element strides, so transposed views need no copy: a matrix whose
// rows or columns are contiguous (one stride 1) maps onto cuBLASLt's column-major layouts with
// CUBLAS_OP_N / CUBLAS_OP_T. A batch stride of 0 broadcasts A or B over the batch.
// Plans (layouts, matmul descriptor, heuristic algorithm) are cached by the whole description;
// there is one cuBLASLt handle per device and one workspace per (device, stream).
//
// Usage (y[batch, m, n] = relu(x[batch, m, k] · w[n, k]^T + b), all row-major):
//   MatmulDesc d{.dtype = DType::BF16, .m = m, .n = n, .k = k, .batch = batch,
//                .a = {k, 1, m * k}, .b = {1, k, 0},           // w^T: strides swapped, shared
//                .c = {n, 1, m * n}, .epilogue = Epilogue::BiasRelu};
//   if (!matmul_supported(d)) { /* make the odd operand contiguous first */ }
//   matmul(d, {x, w, y, b}, stream);                            // asynchronous on stream
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kiln/dtype.h"

namespace kiln::cuda::lib {

// Strides in elements of one operand. Element (i, j) of batch b is at
//   data + b * batch_stride + i * row_stride + j * col_stride.
struct MatrixStrides {
  std::int64_t row_stride = 0;
  std::int64_t col_stride = 1;
  std::int64_t batch_stride = 0;  // 0: the same matrix for every batch (A and B only)
};

enum class MatmulCompute : std::uint8_t {
  Default,  // f32 accumulate for f32/f16/bf16 (f32 products in full f32), f64 for f64
  Tf32,     // f32 operands on tf32 tensor cores (opt-in; about 1e-3 relative error)
};

// What happens to the product before it is stored. Bias adds bias[j] to column j. Gelu is kiln's
// exact x·Φ(x) (erf form, the gelu op's definition) and runs as a separate pass after the product;
// GeluTanh is cuBLASLt's fused tanh approximation (differs from Gelu by up to about 1e-3).
enum class Epilogue : std::uint8_t {
  None,
  Bias,
  Relu,
  BiasRelu,
  Gelu,
  BiasGelu,
  GeluTanh,
  BiasGeluTanh,
};

struct MatmulDesc {
  DType dtype = DType::F32;  // of A, B, C and bias: F32, F16, BF16 or F64
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  std::int64_t batch = 1;
  MatrixStrides a;  // m×k
  MatrixStrides b;  // k×n
  MatrixStrides c;  // m×n (written; must not overlap A, B or itself)
  MatmulCompute compute = MatmulCompute::Default;
  Epilogue epilogue = Epilogue::None;
};

struct MatmulArgs {
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  const void* bias = nullptr;  // n elements of dtype, when the epilogue has a bias
  // C = alpha · A · B + beta · addend (Epilogue::None only, k > 0): addend has C's dtype and
  // strides and is either C itself (updated in place: an optimizer's W - lr · Xᵀ·dY) or memory
  // overlapping none of A, B and C. alpha and beta are rounded to f32 unless dtype is f64.
  const void* addend = nullptr;
  double alpha = 1.0;
  double beta = 0.0;
};

// Whether cuBLASLt takes desc's layouts as they are. False (with the reason in *why) when an
// operand has no unit stride on either axis, a leading dimension is smaller than cuBLASLt
// allows, C is broadcast over the batch, or a bias goes with a C whose columns are contiguous:
// the caller then makes that operand contiguous (row-major) and calls again.
// Throws InvalidArgument for descriptions that are wrong rather than unsupported.
[[nodiscard]] bool matmul_supported(const MatmulDesc& desc, std::string* why = nullptr);

// Runs the product on stream (the current device's). Throws InvalidArgument when
// !matmul_supported(desc), and ExecutionError / OutOfMemory from CUDA and cuBLASLt.
void matmul(const MatmulDesc& desc, const MatmulArgs& args, cudaStream_t stream);

// Plans cached so far (for tests and statistics).
[[nodiscard]] std::size_t matmul_plan_count();

}  // namespace kiln::cuda::lib
