// The spatial kernel family (generated source): average, adaptive average and max pooling over
// 1-3 spatial dims, 2-d interpolation (nearest, bilinear, bicubic), and their gradients, with the
// CPU backend's semantics (src/backends/cpu/cpu_pool.cpp, cpu_interpolate.cpp): f16/bf16
// compute in f32, the same window, tap and weight formulas, the same summation order in the
// forward passes. Inputs are read through their strides (any view); outputs are contiguous.
// Spatial dims are right-aligned into three (d, h, w), the missing ones of size 1.
//  - forward ops: a thread per output element.
//  - avg_pool / adaptive_avg_pool backward: a thread per input element summing the outputs whose
//    window covers it (no atomics, deterministic).
//  - max_pool backward (indices may point anywhere in the plane) and interpolate backward
//    (clamped taps): a thread per gradient element, atomicAdd into a zeroed f32/f64 buffer that
//    is then cast to the dtype, as the CPU computes in f32 and casts.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/dtype.h"
#include "kiln/options.h"

namespace kiln::cuda {

enum class SpatialKernel {
  AvgPool,
  AvgPoolBackward,
  MaxPool,
  MaxPoolBackward,
  AdaptiveAvgPool,
  AdaptiveAvgPoolBackward,
  Interpolate,
  InterpolateBackward,
};

// Mirrors struct P of the generated source: same members, same order.
struct SpatialParams {
  std::int64_t n;         // items (threads' work)
  std::int64_t channels;  // C of [N, C, ...]
  std::int64_t in[3], out[3], kernel[3], stride[3], padding[3], dilation[3];
  std::int64_t xs[5], gs[5], is[5];  // strides (N, C, d, h, w) of x, the gradient, the indices
  std::uint64_t x, g, idx, out_ptr;
  std::int32_t count_include_pad, align_corners;
  std::uint64_t error_word;
  std::uint32_t error_token;
};

const char* spatial_kernel_name(SpatialKernel kernel);

// Source of one kernel (entry point kiln_spatial) for dtype (the tensor dtype; gradients have
// it too); index_dtype for the max-pool kernels, mode for the interpolate ones.
std::string spatial_source(SpatialKernel kernel, DType dtype, DType index_dtype,
                           InterpolateMode mode);

}  // namespace kiln::cuda
