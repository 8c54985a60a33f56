// layer_norm as one generated kernel (cuda_norm.cpp): a block per row of the last dim, the row's
// sums in double in one pass (shifted by its first value, as the CPU does, so a large mean does
// not cancel the variance), then the normalised row written from a second read that the caches
// serve. The default's composition is nine kernels and five round trips through memory.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/dtype.h"

namespace kiln::cuda {

// Mirrors struct P of layer_norm_source's kernel.
struct LayerNormParams {
  std::int64_t rows, width, gamma_stride, beta_stride;
  std::uint64_t x, out, gamma, beta;  // beta 0: none
  double epsilon;
};

// The module with kiln_layer_norm for x of dtype x and parameters of dtypes gamma and beta.
std::string layer_norm_source(DType x, DType gamma, DType beta);

}  // namespace kiln::cuda
