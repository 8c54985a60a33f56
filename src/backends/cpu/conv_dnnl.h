// The CPU convolutions on oneDNN's primitives (builds with KILN_HAVE_DNNL): its JIT kernels
// use the machine's widest vectors on blocked layouts (nChw16c), reached from kiln's
// channels-first tensors by reorders. cpu_conv.cpp calls these first for f32 and keeps its
// im2col + gemm kernels for what oneDNN refuses and for builds without it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/spatial.h"

namespace kiln::cpu {

// The sizes of a convolution besides its window.
struct ConvSizes {
  std::int64_t batch;
  std::int64_t groups;
  std::int64_t in_per_group;   // image channels per group
  std::int64_t out_per_group;  // output channels per group
  std::int64_t rows;           // in_per_group * kernel taps: rows of one group's column matrix
  std::int64_t spatial_dims;   // 1-3, right-aligned in the Window
};

// Multiply-adds below which a convolution stays on one thread.
inline constexpr std::int64_t kConvSerialWork = std::int64_t{1} << 18;

#if KILN_HAVE_DNNL
// Whether 3x3 stride-1 2-D convolutions without groups may take Winograd's algorithm where oneDNN
// has it for this CPU (cpu_conv_dnnl.cpp says how fast and how exact): on unless
// KILN_CONV_WINOGRAD=0 was in the environment at the first call; tests switch it.
bool conv_winograd() noexcept;
void set_conv_winograd(bool on) noexcept;

// Whether the pass's primitive for a whole call of s and w (one task) runs Winograd's algorithm,
// for tests.
enum class ConvPass : std::int64_t { kForward, kInputGrad, kWeightGrad };
bool dnnl_conv_runs_winograd(ConvPass pass, const ConvSizes& s, const Window& w);

// On contiguous channels-first f32 data: the
// convolution y = conv(x, weight) + bias (bias may be null), its input gradient dx from dy,
// and its weight gradient dweight. Each returns false where oneDNN has no primitive for the
// problem (or it is empty); the caller then takes the im2col path, which writes every output.
bool dnnl_conv_forward(const float* x, const float* weight, const float* bias, float* y,
                       const ConvSizes& s, const Window& w);
bool dnnl_conv_input_grad(const float* weight, const float* dy, float* dx, const ConvSizes& s,
                          const Window& w);
bool dnnl_conv_weight_grad(const float* x, const float* dy, float* dweight, const ConvSizes& s,
                           const Window& w);
#endif

}  // namespace kiln::cpu
