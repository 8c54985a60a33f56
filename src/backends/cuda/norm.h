// layer_norm as one generated kernel (cuda_norm.cpp). Rows that fit in registers (the common
// case: up to 32 values per thread with up to 1,024 threads per row) are read once with 16-byte
// loads, reduced in two passes over the registers (the mean, then the squared deviations: no
// cancellation however large the mean), and written from the registers: one read and one write
// of x, the memory floor. Several rows share a block when a row needs fewer than 256 threads. A
// wider row streams: a block per row, the sums in double shifted by the row's first value (as the
// CPU does), the normalised row written from a second read that the caches serve.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/dtype.h"

namespace kiln::cuda {

// Mirrors struct P of the kernels.
struct LayerNormParams {
  std::int64_t rows, width, gamma_stride, beta_stride;
  std::uint64_t x, out, gamma, beta;  // beta 0: none
  double epsilon;
};

// How a row is spread over threads when it fits in registers.
struct LayerNormRows {
  int vector = 1;              // elements per load (16 bytes when rows and bases are aligned)
  int chunks = 1;              // loads per thread
  int threads_per_row = 32;    // a power of two, 32..1024
  int block = 256;             // threads per block: rows_per_block = block / threads_per_row
  bool vector_params = false;  // gamma and beta (if any) read with the same wide loads
  bool fits() const noexcept { return chunks > 0; }
};

// The register plan for rows of width elements of x, or chunks == 0 when they do not fit.
// aligned: x and out start on 16 bytes; params_aligned: gamma and beta (if any) too, with unit
// strides and x's element size.
LayerNormRows layer_norm_rows(DType x, std::int64_t width, bool aligned, bool params_aligned);

// The module with kiln_layer_norm_rows (register plan `rows`) for x of dtype x and parameters of
// dtypes gamma and beta.
std::string layer_norm_rows_source(DType x, DType gamma, DType beta, const LayerNormRows& rows);
// The module with kiln_layer_norm (a block per row, streaming) for any width.
std::string layer_norm_source(DType x, DType gamma, DType beta);

// layer_norm_backward: a warp per row reads x and grad (the row's later passes hit L1), computes
// the row's mean and deviation (two passes, in double), then the sums of grad * gamma and of it
// times x̂, and writes dx (grad's dtype) and x̂ * grad (`xg`, in the compute dtype: f32, or f64)
// for dgamma's column sum. x and grad contiguous; gamma of any stride. Mirrors struct P.
struct LayerNormBackwardParams {
  std::int64_t rows, width, gamma_stride;
  std::uint64_t x, grad, gamma, dx, xg;
  double epsilon;
};
std::string layer_norm_backward_source(DType dtype);

}  // namespace kiln::cuda
