// Source generation of the spatial family (no driver calls; see elementwise_source.cpp).
#include <fmt/format.h>

#include "backends/cuda/kernel_source.h"
#include "backends/cuda/spatial.h"

namespace kiln::cuda {

using namespace fmt::literals;

namespace {

constexpr const char* kCommon = R"CUDA(
struct P {
  i64 n, channels;
  i64 in[3], out[3], kernel[3], stride[3], padding[3], dilation[3];
  i64 xs[5], gs[5], is[5];
  u64 x, g, idx, out_ptr;
  int count_include_pad, align_corners;
  unsigned* err_word; unsigned err_token;
};
__device__ __forceinline__ i64 k_fdiv(i64 a, i64 b) { const i64 q = a / b; return (a % b != 0 && a < 0) ? q - 1 : q; }
__device__ __forceinline__ i64 k_cdiv(i64 a, i64 b) { return -k_fdiv(-a, b); }
__device__ __forceinline__ i64 k_clampi(i64 v, i64 lo, i64 hi) { return v < lo ? lo : (v > hi ? hi : v); }
// Item i of [N, C, dims...] (row-major) as its batch b, channel c and spatial coordinates.
__device__ __forceinline__ void k_split(const P& p, i64 i, const i64* dims, i64& b, i64& c, i64* at) {
  at[2] = i % dims[2]; i /= dims[2];
  at[1] = i % dims[1]; i /= dims[1];
  at[0] = i % dims[0]; i /= dims[0];
  c = i % p.channels; b = i / p.channels;
}
__device__ __forceinline__ i64 k_at(const i64* s, i64 b, i64 c, i64 d, i64 h, i64 w) {
  return b * s[0] + c * s[1] + d * s[2] + h * s[3] + w * s[4];
}
// The average-pooling window of output o along dim d: the clipped [lo, hi) and its size with
// the padding counted (clipped to the padded input), as the CPU's avg_span.
__device__ __forceinline__ void k_avg_span(const P& p, int d, i64 o, i64& lo, i64& hi, i64& padded) {
  const i64 start = o * p.stride[d] - p.padding[d];
  const i64 stop = min(start + p.kernel[d], p.in[d] + p.padding[d]);
  lo = max(start, (i64)0); hi = min(stop, p.in[d]); padded = stop - start;
}
__device__ __forceinline__ i64 k_avg_divisor(const P& p, const i64* o) {
  i64 lo, hi, padded, with_pad = 1, inside = 1;
  for (int d = 0; d < 3; ++d) { k_avg_span(p, d, o[d], lo, hi, padded); with_pad *= padded; inside *= hi - lo; }
  return p.count_include_pad ? with_pad : inside;
}
__device__ __forceinline__ i64 k_adaptive_start(i64 i, i64 in, i64 out) { return (i * in) / out; }
__device__ __forceinline__ i64 k_adaptive_end(i64 i, i64 in, i64 out) { return ((i + 1) * in + out - 1) / out; }
)CUDA";

// The taps of output position i along an axis (index, weight), PyTorch's coordinate rules as
// in cpu_interpolate.cpp; the source coordinate is computed without fused multiply-adds so it
// rounds as on the CPU.
constexpr const char* kTapsNearest =
    R"CUDA(  index[0] = min((i * in) / out, in - 1); weight[0] = 1.0;
)CUDA";
constexpr const char* kTapsBilinear =
    R"CUDA(  const double src = fmax(k_source(p, i, in, out), 0.0);
  const i64 i0 = k_clampi((i64)src, 0, in - 1);
  const double lambda = fmin(fmax(src - (double)i0, 0.0), 1.0);
  index[0] = i0; index[1] = i0 < in - 1 ? i0 + 1 : i0;
  weight[0] = 1.0 - lambda; weight[1] = lambda;
)CUDA";
constexpr const char* kTapsBicubic = R"CUDA(  const double src = k_source(p, i, in, out);
  const double base = floor(src);
  const double f = src - base;
  const i64 i0 = (i64)base;
  for (int t = 0; t < 4; ++t) index[t] = k_clampi(i0 - 1 + t, 0, in - 1);
  weight[0] = k_cubic_far(f + 1); weight[1] = k_cubic_near(f);
  weight[2] = k_cubic_near(1 - f); weight[3] = k_cubic_far(2 - f);
)CUDA";

std::string taps_source(InterpolateMode mode) {
  const char* taps = mode == InterpolateMode::Nearest    ? kTapsNearest
                     : mode == InterpolateMode::Bilinear ? kTapsBilinear
                                                         : kTapsBicubic;
  return fmt::format(
      R"CUDA(__device__ __forceinline__ double k_cubic_near(double x) {{ return ((-0.75 + 2) * x - (-0.75 + 3)) * x * x + 1; }}
__device__ __forceinline__ double k_cubic_far(double x) {{ return ((-0.75 * x - 5 * -0.75) * x + 8 * -0.75) * x - 4 * -0.75; }}
__device__ __forceinline__ double k_source(const P& p, i64 i, i64 in, i64 out) {{
  const double scale = p.align_corners ? (out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0)
                                       : (double)in / (double)out;
  return p.align_corners ? __dmul_rn(scale, (double)i) : __dsub_rn(__dmul_rn(scale, __dadd_rn((double)i, 0.5)), 0.5);
}}
__device__ __forceinline__ void k_taps(const P& p, i64 i, i64 in, i64 out, i64* index, double* weight) {{
{taps}}}
)CUDA",
      "taps"_a = taps);
}

int tap_count(InterpolateMode mode) {
  return mode == InterpolateMode::Nearest ? 1 : (mode == InterpolateMode::Bilinear ? 2 : 4);
}

constexpr const char* kAvgPool = R"CUDA(    k_split(p, i, p.out, b, c, o);
    i64 lo[3], hi[3], padded[3];
    for (int d = 0; d < 3; ++d) k_avg_span(p, d, o[d], lo[d], hi[d], padded[d]);
    T total = 0;
    for (i64 id = lo[0]; id < hi[0]; ++id)
      for (i64 ih = lo[1]; ih < hi[1]; ++ih)
        for (i64 iw = lo[2]; iw < hi[2]; ++iw) total += LOADX(k_at(p.xs, b, c, id, ih, iw));
    const T value = total * ((T)1 / (T)k_avg_divisor(p, o));
    STORE(i, value);
)CUDA";
// Output w covers input position x along a dim iff w*stride - padding <= x < that + kernel.
constexpr const char* kAvgPoolBackward = R"CUDA(    k_split(p, i, p.in, b, c, o);
    i64 lo[3], hi[3];
    for (int d = 0; d < 3; ++d) {
      lo[d] = max(k_fdiv(o[d] + p.padding[d] - p.kernel[d], p.stride[d]) + 1, (i64)0);
      hi[d] = min(k_fdiv(o[d] + p.padding[d], p.stride[d]), p.out[d] - 1);
    }
    T total = 0;
    i64 w[3];
    for (w[0] = lo[0]; w[0] <= hi[0]; ++w[0])
      for (w[1] = lo[1]; w[1] <= hi[1]; ++w[1])
        for (w[2] = lo[2]; w[2] <= hi[2]; ++w[2])
          total += LOADG(k_at(p.gs, b, c, w[0], w[1], w[2])) * ((T)1 / (T)k_avg_divisor(p, w));
    STORE(i, total);
)CUDA";
constexpr const char* kMaxPool = R"CUDA(    k_split(p, i, p.out, b, c, o);
    i64 start[3], first[3], last[3];
    bool inside = true;
    for (int d = 0; d < 3; ++d) {
      start[d] = o[d] * p.stride[d] - p.padding[d];
      first[d] = k_clampi(k_cdiv(-start[d], p.dilation[d]), 0, p.kernel[d]);
      last[d] = k_clampi(k_cdiv(p.in[d] - start[d], p.dilation[d]), first[d], p.kernel[d]);
      inside = inside && first[d] < last[d];
    }
    // All -inf: the first tap inside; a window entirely in the padding points at the nearest
    // in-plane position (the CPU's rule).
    i64 index = inside ? ((start[0] + first[0] * p.dilation[0]) * p.in[1] + start[1] + first[1] * p.dilation[1]) * p.in[2] +
                             start[2] + first[2] * p.dilation[2]
                       : (k_clampi(start[0], 0, p.in[0] - 1) * p.in[1] + k_clampi(start[1], 0, p.in[1] - 1)) * p.in[2] +
                             k_clampi(start[2], 0, p.in[2] - 1);
    T best = lowest;
    for (i64 kd = first[0]; kd < last[0]; ++kd) {
      const i64 id = start[0] + kd * p.dilation[0];
      for (i64 kh = first[1]; kh < last[1]; ++kh) {
        const i64 ih = start[1] + kh * p.dilation[1];
        for (i64 kw = first[2]; kw < last[2]; ++kw) {
          const i64 iw = start[2] + kw * p.dilation[2];
          const T v = LOADX(k_at(p.xs, b, c, id, ih, iw));
          if (v > best || v != v) { best = v; index = (id * p.in[1] + ih) * p.in[2] + iw; }
        }
      }
    }
    STORE(i, best);
)CUDA";
constexpr const char* kAdaptiveAvgPool = R"CUDA(    k_split(p, i, p.out, b, c, o);
    i64 lo[3], hi[3];
    for (int d = 0; d < 3; ++d) { lo[d] = k_adaptive_start(o[d], p.in[d], p.out[d]); hi[d] = k_adaptive_end(o[d], p.in[d], p.out[d]); }
    double total = 0;
    for (i64 id = lo[0]; id < hi[0]; ++id)
      for (i64 ih = lo[1]; ih < hi[1]; ++ih)
        for (i64 iw = lo[2]; iw < hi[2]; ++iw) total += (double)LOADX(k_at(p.xs, b, c, id, ih, iw));
    const T value = (T)(total / (double)((hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2])));
    STORE(i, value);
)CUDA";
// Output w's window [start, end) holds x iff floor(x * out / in) <= w <= ceil((x + 1) *
// out / in) - 1; the range is widened by one and every candidate tested exactly.
constexpr const char* kAdaptiveAvgPoolBackward = R"CUDA(    k_split(p, i, p.in, b, c, o);
    i64 lo[3], hi[3];
    for (int d = 0; d < 3; ++d) {
      lo[d] = max((o[d] * p.out[d]) / p.in[d] - 1, (i64)0);
      hi[d] = min(((o[d] + 1) * p.out[d] + p.in[d] - 1) / p.in[d], p.out[d] - 1);
    }
    T total = 0;
    for (i64 wd = lo[0]; wd <= hi[0]; ++wd) {
      const i64 d0 = k_adaptive_start(wd, p.in[0], p.out[0]), d1 = k_adaptive_end(wd, p.in[0], p.out[0]);
      if (o[0] < d0 || o[0] >= d1) continue;
      for (i64 wh = lo[1]; wh <= hi[1]; ++wh) {
        const i64 h0 = k_adaptive_start(wh, p.in[1], p.out[1]), h1 = k_adaptive_end(wh, p.in[1], p.out[1]);
        if (o[1] < h0 || o[1] >= h1) continue;
        for (i64 ww = lo[2]; ww <= hi[2]; ++ww) {
          const i64 w0 = k_adaptive_start(ww, p.in[2], p.out[2]), w1 = k_adaptive_end(ww, p.in[2], p.out[2]);
          if (o[2] < w0 || o[2] >= w1) continue;
          total += LOADG(k_at(p.gs, b, c, wd, wh, ww)) / (T)((d1 - d0) * (h1 - h0) * (w1 - w0));
        }
      }
    }
    STORE(i, total);
)CUDA";
constexpr const char* kInterpolate = R"CUDA(    k_split(p, i, p.out, b, c, o);
    i64 ri[4], ci[4]; double rw[4], cw[4];
    k_taps(p, o[1], p.in[1], p.out[1], ri, rw);
    k_taps(p, o[2], p.in[2], p.out[2], ci, cw);
    // Along the row first, then across rows: the CPU's order.
    T total = 0;
    for (int a = 0; a < kTaps; ++a) {
      T along = 0;
      for (int t = 0; t < kTaps; ++t) along += (T)cw[t] * LOADX(k_at(p.xs, b, c, 0, ri[a], ci[t]));
      total += (T)rw[a] * along;
    }
    STORE(i, total);
)CUDA";
constexpr const char* kInterpolateBackward = R"CUDA(    k_split(p, i, p.out, b, c, o);
    i64 ri[4], ci[4]; double rw[4], cw[4];
    k_taps(p, o[1], p.in[1], p.out[1], ri, rw);
    k_taps(p, o[2], p.in[2], p.out[2], ci, cw);
    const T g = LOADG(k_at(p.gs, b, c, 0, o[1], o[2]));
    T* plane = (T*)p.out_ptr + (b * p.channels + c) * p.in[1] * p.in[2];
    for (int a = 0; a < kTaps; ++a) {
      const T row = (T)rw[a] * g;
      for (int t = 0; t < kTaps; ++t) atomicAdd(plane + ri[a] * p.in[2] + ci[t], (T)cw[t] * row);
    }
)CUDA";

// The loop body of kernel for item i (the output's or, backward, the input's element).
std::string kernel_body(SpatialKernel kernel, const char* index_type, const char* infinity,
                        InterpolateMode mode) {
  switch (kernel) {
    case SpatialKernel::AvgPool:
      return kAvgPool;
    case SpatialKernel::AvgPoolBackward:
      return kAvgPoolBackward;
    case SpatialKernel::MaxPool:
      return fmt::format(
          "    const T lowest = -{infinity};\n{body}    (({I}*)p.idx)[i] = ({I})index;\n",
          "infinity"_a = infinity, "body"_a = kMaxPool, "I"_a = index_type);
    case SpatialKernel::MaxPoolBackward:
      return fmt::format(R"CUDA(    k_split(p, i, p.out, b, c, o);
    const i64 plane_size = p.in[0] * p.in[1] * p.in[2];
    const i64 at = (i64)((const {I}*)p.idx)[k_at(p.is, b, c, o[0], o[1], o[2])];
    if (at < 0 || at >= plane_size) {{ err = true; continue; }}
    atomicAdd((T*)p.out_ptr + (b * p.channels + c) * plane_size + at, (T)LOADG(k_at(p.gs, b, c, o[0], o[1], o[2])));
)CUDA",
                         "I"_a = index_type);
    case SpatialKernel::AdaptiveAvgPool:
      return kAdaptiveAvgPool;
    case SpatialKernel::AdaptiveAvgPoolBackward:
      return kAdaptiveAvgPoolBackward;
    case SpatialKernel::Interpolate:
      return fmt::format("    constexpr int kTaps = {};\n{}", tap_count(mode), kInterpolate);
    case SpatialKernel::InterpolateBackward:
      return fmt::format("    constexpr int kTaps = {};\n{}", tap_count(mode),
                         kInterpolateBackward);
  }
  return {};
}

}  // namespace

const char* spatial_kernel_name(SpatialKernel kernel) {
  switch (kernel) {
    case SpatialKernel::AvgPool:
      return "avg_pool";
    case SpatialKernel::AvgPoolBackward:
      return "avg_pool_backward";
    case SpatialKernel::MaxPool:
      return "max_pool_with_indices";
    case SpatialKernel::MaxPoolBackward:
      return "max_pool_with_indices_backward";
    case SpatialKernel::AdaptiveAvgPool:
      return "adaptive_avg_pool";
    case SpatialKernel::AdaptiveAvgPoolBackward:
      return "adaptive_avg_pool_backward";
    case SpatialKernel::Interpolate:
      return "interpolate";
    case SpatialKernel::InterpolateBackward:
      return "interpolate_backward";
  }
  return "?";
}

std::string spatial_source(SpatialKernel kernel, DType dtype, DType index_dtype,
                           InterpolateMode mode) {
  const char* S = storage_type(dtype);
  const bool interpolating =
      kernel == SpatialKernel::Interpolate || kernel == SpatialKernel::InterpolateBackward;
  return fmt::format(
      R"CUDA({prelude}{common}typedef {T} T;
#define LOADX(at) ({load_x})
#define LOADG(at) ({load_g})
#define STORE(at, value) ((({S}*)p.out_ptr)[at] = {store})
{taps}extern "C" __global__ void __launch_bounds__(256) kiln_spatial(const P p) {{
  bool err = false;
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < p.n; i += (i64)gridDim.x * blockDim.x) {{
    i64 b, c, o[3];
{body}  }}
  if (err) *p.err_word = p.err_token;
}}
)CUDA",
      "prelude"_a = kernel_prelude(), "common"_a = kCommon,
      // float for f16/bf16/f32, double for f64
      "T"_a = compute_type(dtype),
      "load_x"_a = load_expression(dtype, fmt::format("((const {}*)p.x)[at]", S)),
      "load_g"_a = load_expression(dtype, fmt::format("((const {}*)p.g)[at]", S)), "S"_a = S,
      "store"_a = store_expression(dtype, "value"),
      "taps"_a = interpolating ? taps_source(mode) : std::string(),
      "body"_a = kernel_body(kernel, storage_type(index_dtype),
                             dtype == DType::F64 ? "__longlong_as_double(0x7ff0000000000000ll)"
                                                 : "__int_as_float(0x7f800000)",
                             mode));
}

}  // namespace kiln::cuda
