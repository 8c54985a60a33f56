// Generated source of the convolution kernels (cuda_conv.cpp): im2col, which lays the windows of
// an image out as the columns of a matrix that cuBLASLt multiplies by the weight, and col2im,
// its adjoint as a gather (each image element sums, in a fixed order, the column entries that
// read it: deterministic, no atomics), with the bias added before the one rounding. Both walk
// three right-aligned spatial dims (1d and 2d pad the leading ones with size 1), so one kernel
// per dtype serves every rank. Header-only so the codegen test compiles it with NVRTC without a
// GPU.
#pragma once

#include <fmt/format.h>

#include <string>

#include "backends/cuda/kernel_source.h"

namespace kiln::cuda {

// Mirrored by struct Im2colParams in cuda_conv.cpp: same members, same order.
//   col[n * col_n + c * col_c + k * col_k + l] = x[n, c, window l's tap k] (0 in the padding)
// for n < images, c < channels, k < taps (row-major over the kernel), l < positions (row-major
// over out); window position o's tap j reads image position o * stride - padding + j * dilation.
inline constexpr const char* kIm2colParams = R"CUDA(
struct P {
  i64 total, positions, channels;
  i64 x_n, x_c, x_s[3];
  i64 col_n, col_c, col_k;
  i64 in[3], out[3], kernel[3], stride[3], padding[3], dilation[3];
  u64 x, col;
};
)CUDA";

// Mirrored by struct Col2imParams in cuda_conv.cpp: same members, same order.
//   y[n, c, pos] = bias[c] + sum over taps k and window positions l whose tap k reads pos of
//                  col[n * col_n + c * col_c + k * col_k + l]
// for y contiguous [images, channels, in...]; `in` is the image (y's spatial dims), `out` the
// grid of window positions. bias is optional (0 for none), read at c * bias_stride.
inline constexpr const char* kCol2imParams = R"CUDA(
struct P {
  i64 total, channels;
  i64 col_n, col_c, col_k;
  i64 in[3], out[3], kernel[3], stride[3], padding[3], dilation[3];
  i64 kstep[3], ldelta[3];
  i64 bias_stride;
  u64 col, bias, y;
};
)CUDA";

// One thread per (image, channel, window position): the position's coordinates are decoded once
// (32-bit divisions when the item count allows), then every tap is copied. Adjacent threads take
// adjacent positions: the stores are coalesced and the loads walk the image row.
inline constexpr const char* kIm2col = R"CUDA(
extern "C" __global__ void __launch_bounds__(256) kiln_im2col(const P p) {
  const T* x = (const T*)p.x;
  T* col = (T*)p.col;
  const bool small = p.total <= 0xffffffffll;
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < p.total; i += (i64)gridDim.x * blockDim.x) {
    i64 l, c, n, o0, o1, o2;
    if (small) {
      const unsigned u = (unsigned)i, L = (unsigned)p.positions, C = (unsigned)p.channels;
      const unsigned q = u / L, lu = u - q * L;
      c = q % C;
      n = q / C;
      l = lu;
      const unsigned O2 = (unsigned)p.out[2], O1 = (unsigned)p.out[1];
      const unsigned r = lu / O2;
      o2 = lu - r * O2;
      o1 = r % O1;
      o0 = r / O1;
    } else {
      const i64 q = i / p.positions;
      l = i - q * p.positions;
      c = q % p.channels;
      n = q / p.channels;
      const i64 r = l / p.out[2];
      o2 = l - r * p.out[2];
      o1 = r % p.out[1];
      o0 = r / p.out[1];
    }
    const T* src = x + n * p.x_n + c * p.x_c;
    T* dst = col + n * p.col_n + c * p.col_c + l;
    i64 k = 0;
    for (i64 k0 = 0; k0 < p.kernel[0]; ++k0) {
      const i64 i0 = o0 * p.stride[0] - p.padding[0] + k0 * p.dilation[0];
      const bool in0 = i0 >= 0 && i0 < p.in[0];
      for (i64 k1 = 0; k1 < p.kernel[1]; ++k1) {
        const i64 i1 = o1 * p.stride[1] - p.padding[1] + k1 * p.dilation[1];
        const bool in01 = in0 && i1 >= 0 && i1 < p.in[1];
        for (i64 k2 = 0; k2 < p.kernel[2]; ++k2, ++k) {
          const i64 i2 = o2 * p.stride[2] - p.padding[2] + k2 * p.dilation[2];
          T v = (T)0;
          if (in01 && i2 >= 0 && i2 < p.in[2]) v = src[i0 * p.x_s[0] + i1 * p.x_s[1] + i2 * p.x_s[2]];
          dst[k * p.col_k] = v;
        }
      }
    }
  }
}
)CUDA";

inline std::string im2col_source(DType dtype) {
  using namespace fmt::literals;
  return fmt::format("{prelude}{params}typedef {T} T;\n{kernel}", "prelude"_a = kernel_prelude(),
                     "params"_a = kIm2colParams, "T"_a = storage_type(dtype), "kernel"_a = kIm2col);
}

// One thread per element of y. Along each dim, the taps j whose window position lands on the
// element are those with t = pos + padding - j * dilation >= 0 a multiple of stride (and
// t / stride < out): the first is found with at most kstep remainders, the next ones are kstep
// taps apart and ldelta window positions back (kstep = stride / gcd(stride, dilation), ldelta =
// kstep * dilation / stride, from the host), so the tap loops divide nothing. Contributions are
// summed in tap order in the compute type, plus the bias, rounded once. Spatial coordinates are
// 32-bit (the host checks the sizes), column offsets 64-bit.
inline constexpr const char* kCol2im = R"CUDA(
// The first tap of one dim that reaches pos (-1 when none), and its window position.
__device__ __forceinline__ int k_first_tap(int pos, int padding, int stride, int dilation,
                                           int kernel, int kstep, int& first_l) {
  const int limit = kernel < kstep ? kernel : kstep;
  for (int j = 0; j < limit; ++j) {
    const int t = pos + padding - j * dilation;
    if (t < 0) return -1;
    if (t % stride == 0) { first_l = t / stride; return j; }
  }
  return -1;
}

extern "C" __global__ void __launch_bounds__(256) kiln_col2im(const P p) {
  const T* col = (const T*)p.col;
  const T* bias = (const T*)p.bias;
  T* y = (T*)p.y;
  const i64 image = p.in[0] * p.in[1] * p.in[2];
  const bool small = p.total <= 0xffffffffll;
  const int K0 = (int)p.kernel[0], K1 = (int)p.kernel[1], K2 = (int)p.kernel[2];
  const int O0 = (int)p.out[0], O1 = (int)p.out[1], O2 = (int)p.out[2];
  const int st0 = (int)p.kstep[0], st1 = (int)p.kstep[1], st2 = (int)p.kstep[2];
  const int ld0 = (int)p.ldelta[0], ld1 = (int)p.ldelta[1], ld2 = (int)p.ldelta[2];
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < p.total; i += (i64)gridDim.x * blockDim.x) {
    i64 c, n;
    int q0, q1, q2;
    if (small) {
      const unsigned u = (unsigned)i, S = (unsigned)image, C = (unsigned)p.channels;
      const unsigned q = u / S, pos = u - q * S;
      c = q % C;
      n = q / C;
      const unsigned I2 = (unsigned)p.in[2], I1 = (unsigned)p.in[1];
      const unsigned r = pos / I2;
      q2 = (int)(pos - r * I2);
      q1 = (int)(r % I1);
      q0 = (int)(r / I1);
    } else {
      const i64 q = i / image, pos = i - q * image;
      c = q % p.channels;
      n = q / p.channels;
      const i64 r = pos / p.in[2];
      q2 = (int)(pos - r * p.in[2]);
      q1 = (int)(r % p.in[1]);
      q0 = (int)(r / p.in[1]);
    }
    const T* src = col + n * p.col_n + c * p.col_c;
    A acc = (A)0;
    int f0l = 0, f1l = 0, f2l = 0;
    const int f0 = k_first_tap(q0, (int)p.padding[0], (int)p.stride[0], (int)p.dilation[0], K0, st0, f0l);
    const int f1 = k_first_tap(q1, (int)p.padding[1], (int)p.stride[1], (int)p.dilation[1], K1, st1, f1l);
    const int f2 = k_first_tap(q2, (int)p.padding[2], (int)p.stride[2], (int)p.dilation[2], K2, st2, f2l);
    if (f0 >= 0 && f1 >= 0 && f2 >= 0) {
      for (int k0 = f0, l0 = f0l; k0 < K0 && l0 >= 0; k0 += st0, l0 -= ld0) {
        if (l0 >= O0) continue;
        for (int k1 = f1, l1 = f1l; k1 < K1 && l1 >= 0; k1 += st1, l1 -= ld1) {
          if (l1 >= O1) continue;
          const T* row = src + (i64)((k0 * K1 + k1) * K2) * p.col_k + (i64)((l0 * O1 + l1) * O2);
          for (int k2 = f2, l2 = f2l; k2 < K2 && l2 >= 0; k2 += st2, l2 -= ld2) {
            if (l2 >= O2) continue;
            acc += k_load(row + (i64)k2 * p.col_k + l2);
          }
        }
      }
    }
    if (p.bias != 0) acc += k_load(bias + c * p.bias_stride);
    y[i] = k_store(acc);
  }
}
)CUDA";

inline std::string col2im_source(DType dtype) {
  using namespace fmt::literals;
  return fmt::format(R"CUDA({prelude}{params}typedef {T} T;
typedef {A} A;
__device__ __forceinline__ A k_load(const T* at) {{ return {load}; }}
__device__ __forceinline__ T k_store(A value) {{ return {store}; }}
{kernel})CUDA",
                     "prelude"_a = kernel_prelude(), "params"_a = kCol2imParams,
                     "T"_a = storage_type(dtype), "A"_a = compute_type(dtype),
                     "load"_a = load_expression(dtype, "(*at)"),
                     "store"_a = store_expression(dtype, "value"), "kernel"_a = kCol2im);
}

}  // namespace kiln::cuda
