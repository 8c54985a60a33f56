// Source generation of the layer_norm kernel (no driver calls: the tests compile it with NVRTC).
#include <fmt/format.h>

#include <algorithm>

#include "backends/cuda/kernel_source.h"
#include "backends/cuda/norm.h"

namespace kiln::cuda {

using namespace fmt::literals;

LayerNormRows layer_norm_rows(DType x, std::int64_t width, bool aligned, bool params_aligned) {
  LayerNormRows rows;
  const auto size = static_cast<std::int64_t>(dtype_size(x));
  if (aligned && width % (16 / size) == 0) rows.vector = static_cast<int>(16 / size);
  // Values a thread holds: registers for f64 count twice.
  const std::int64_t most = x == DType::F64 ? 16 : 32;
  const std::int64_t vectors = (width + rows.vector - 1) / rows.vector;
  std::int64_t threads = 32;
  while (threads < 1024 && (vectors + threads - 1) / threads * rows.vector > most) threads *= 2;
  const std::int64_t chunks = (vectors + threads - 1) / threads;
  if (chunks * rows.vector > most) return LayerNormRows{.chunks = 0};
  rows.chunks = static_cast<int>(chunks);
  rows.threads_per_row = static_cast<int>(threads);
  rows.block = std::max(rows.threads_per_row, 256);
  rows.vector_params = rows.vector > 1 && params_aligned;
  return rows;
}

std::string layer_norm_rows_source(DType x, DType gamma, DType beta, const LayerNormRows& rows) {
  const bool wide = rows.vector > 1;
  // Loads of one chunk into v[c * VEC + k]; padding (past the row, or a block's row past the
  // last) reads as zero and is left out of the second pass.
  const std::string load_chunk = wide
                                     ? fmt::format(R"CUDA(X t;
      t.u = make_uint4(0u, 0u, 0u, 0u);
      if (live && at < p.width) t.u = __ldg((const uint4*)(in + at));
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[c * VEC + k] = {load};)CUDA",
                                                   "load"_a = load_expression(x, "t.e[k]"))
                                     : fmt::format("v[c] = live && at < p.width ? ({load}) : (C)0;",
                                                   "load"_a = load_expression(x, "in[at]"));
  const auto param = [&](DType d, const char* name, const char* wide_at) {
    return convert_expression(
        d, x,
        load_expression(d, rows.vector_params
                               ? std::string(wide_at)
                               : fmt::format("{}[(at + k) * p.{}_stride]", name, name)));
  };
  const std::string store_chunk = fmt::format(
      R"CUDA({load_params}
#pragma unroll
        for (int k = 0; k < VEC; ++k) {{
          const C g = {gamma_at};
          const C b = beta ? (C)({beta_at}) : (C)0;
          const C value = ((v[c * VEC + k] - m) - m_low) * r * g + b;
          {put};
        }}
        {write})CUDA",
      "load_params"_a = rows.vector_params
                            ? "G gw; gw.u = __ldg((const uint4*)(gamma + at));\n        B bw; "
                              "bw.u = beta ? __ldg((const uint4*)(beta + at)) : make_uint4(0u, 0u, "
                              "0u, 0u);"
                            : "",
      "gamma_at"_a = param(gamma, "gamma", "gw.e[k]"), "beta_at"_a = param(beta, "beta", "bw.e[k]"),
      "put"_a = wide ? "o.e[k] = " + store_expression(x, "value")
                     : "out[at + k] = " + store_expression(x, "value"),
      "write"_a = wide ? "*(uint4*)(out + at) = o.u;" : "");
  return fmt::format(R"CUDA({prelude}
struct P {{
  i64 rows, width, gamma_stride, beta_stride;
  u64 x, out, gamma, beta;
  double epsilon;
}};
#define VEC {vector}
#define CHUNKS {chunks}
#define TPR {tpr}
#define BLOCK {block}
typedef {c_t} C;  // arithmetic
typedef {a_t} A;  // a thread's sum of squared deviations
union X {{ uint4 u; {x_t} e[VEC]; }};
union G {{ uint4 u; {gamma_t} e[VEC]; }};
union B {{ uint4 u; {beta_t} e[VEC]; }};
// The sum over the TPR lanes of each row, in every lane of it; the same order every time.
__device__ __forceinline__ double k_row_sum(double v, double* shared) {{
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (TPR > 32) {{
    if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = v;
    __syncthreads();
    const int first = (threadIdx.x / TPR) * (TPR / 32);
    v = 0;
    for (int w = 0; w < TPR / 32; ++w) v += shared[first + w];
    __syncthreads();  // shared is free again for the next sum
  }}
  return v;
}}
extern "C" __global__ void __launch_bounds__(BLOCK) kiln_layer_norm_rows(const P p) {{
  __shared__ double shared[BLOCK / 32];
  const {gamma_t}* gamma = (const {gamma_t}*)p.gamma;
  const {beta_t}* beta = (const {beta_t}*)p.beta;
  const int lane = threadIdx.x % TPR;
  // Every thread of the block runs each iteration (the row sums synchronise the block).
  for (i64 first = (i64)blockIdx.x * (BLOCK / TPR); first < p.rows;
       first += (i64)gridDim.x * (BLOCK / TPR)) {{
    const i64 row = first + threadIdx.x / TPR;
    const bool live = row < p.rows;
    const {x_t}* in = (const {x_t}*)p.x + row * p.width;
    C v[CHUNKS * VEC];
    // The sum in double: float partial sums of values around a large mean (1e4 +- 1) lose the
    // digits the deviations live in. The squared deviations are small: A serves them.
    double sum = 0;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {{
      const i64 at = ((i64)c * TPR + lane) * VEC;
      {load_chunk}
    }}
#pragma unroll
    for (int i = 0; i < CHUNKS * VEC; ++i) sum += (double)v[i];
    const double mean = k_row_sum(sum, shared) / (double)p.width;
    // The mean in two parts: a float mean alone loses the deviations of rows whose mean is large
    // against their spread (1e4 +- 1 keeps three digits).
    const C m = (C)mean, m_low = (C)(mean - (double)m);
    A squares = 0;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {{
      const i64 at = ((i64)c * TPR + lane) * VEC;
      if (live && at < p.width) {{
#pragma unroll
        for (int k = 0; k < VEC; ++k) {{
          const C d = (v[c * VEC + k] - m) - m_low;
          squares += d * d;
        }}
      }}
    }}
    const double variance = k_row_sum((double)squares, shared) / (double)p.width;
    const C r = (C)(1.0 / sqrt(variance + p.epsilon));
    if (!live) continue;
    {x_t}* out = ({x_t}*)p.out + row * p.width;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {{
      const i64 at = ((i64)c * TPR + lane) * VEC;
      if (at < p.width) {{
        {declare_out}{store_chunk}
      }}
    }}
  }}
}}
)CUDA",
                     "prelude"_a = kernel_prelude(), "vector"_a = rows.vector,
                     "chunks"_a = rows.chunks, "tpr"_a = rows.threads_per_row,
                     "block"_a = rows.block, "c_t"_a = compute_type(x),
                     "a_t"_a = x == DType::F64 ? "double" : "float", "x_t"_a = storage_type(x),
                     "gamma_t"_a = storage_type(gamma), "beta_t"_a = storage_type(beta),
                     "load_chunk"_a = load_chunk, "declare_out"_a = wide ? "X o;\n        " : "",
                     "store_chunk"_a = store_chunk);
}

std::string layer_norm_source(DType x, DType gamma, DType beta) {
  auto load = [](DType d, const char* at) { return load_expression(d, at); };
  return fmt::format(R"CUDA({prelude}
struct P {{
  i64 rows, width, gamma_stride, beta_stride;
  u64 x, out, gamma, beta;
  double epsilon;
}};
__device__ __forceinline__ double k_block_sum(double v, double* shared) {{
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < (int)(blockDim.x >> 5) ? shared[lane] : 0.0;
  if (warp == 0) {{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) shared[32] = v;
  }}
  __syncthreads();
  v = shared[32];
  __syncthreads();  // shared is free again for the next sum
  return v;
}}
extern "C" __global__ void __launch_bounds__(256) kiln_layer_norm(const P p) {{
  __shared__ double shared[33];
  const {gamma_t}* gamma = (const {gamma_t}*)p.gamma;
  const {beta_t}* beta = (const {beta_t}*)p.beta;
  for (i64 row = blockIdx.x; row < p.rows; row += gridDim.x) {{
    const {x_t}* in = (const {x_t}*)p.x + row * p.width;
    {out_t}* out = ({out_t}*)p.out + row * p.width;
    const double shift = (double)({first});
    double s1 = 0, s2 = 0;
    for (i64 i = threadIdx.x; i < p.width; i += blockDim.x) {{
      const double v = (double)({element}) - shift;
      s1 += v;
      s2 += v * v;
    }}
    s1 = k_block_sum(s1, shared);
    s2 = k_block_sum(s2, shared);
    const double n = (double)p.width;
    const double centred = s1 / n;
    const double variance = fmax(s2 / n - centred * centred, 0.0);
    const double mean = shift + centred;
    const double inv = 1.0 / sqrt(variance + p.epsilon);
    for (i64 i = threadIdx.x; i < p.width; i += blockDim.x) {{
      const double g = (double)({gamma_at});
      const double b = beta ? (double)({beta_at}) : 0.0;
      const double value = ((double)({element}) - mean) * inv * g + b;
      out[i] = {store};
    }}
  }}
}}
)CUDA",
                     "prelude"_a = kernel_prelude(), "x_t"_a = storage_type(x),
                     "out_t"_a = storage_type(x), "gamma_t"_a = storage_type(gamma),
                     "beta_t"_a = storage_type(beta), "first"_a = load(x, "in[0]"),
                     "element"_a = load(x, "in[i]"),
                     "gamma_at"_a = load(gamma, "gamma[i * p.gamma_stride]"),
                     "beta_at"_a = load(beta, "beta[i * p.beta_stride]"),
                     "store"_a = store_expression(x, convert_expression(DType::F64, x, "value")));
}

std::string layer_norm_backward_source(DType dtype) {
  auto load = [dtype](const char* at) { return load_expression(dtype, at); };
  const DType xg = dtype == DType::F64 ? DType::F64 : DType::F32;
  return fmt::format(
      R"CUDA({prelude}
struct P {{
  i64 rows, width, gamma_stride;
  u64 x, grad, gamma, dx, xg;
  double epsilon;
}};
__device__ __forceinline__ double k_warp_sum(double v) {{
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}}
extern "C" __global__ void __launch_bounds__(256) kiln_layer_norm_backward(const P p) {{
  k_grid_dependency();
  const int lane = threadIdx.x & 31;
  const i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
  const {t}* gamma = (const {t}*)p.gamma;
  const double n = (double)p.width;
  for (i64 row = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < p.rows; row += warps) {{
    const {t}* x = (const {t}*)p.x + row * p.width;
    const {t}* g = (const {t}*)p.grad + row * p.width;
    {t}* dx = ({t}*)p.dx + row * p.width;
    {xg_t}* xg = ({xg_t}*)p.xg + row * p.width;
    double s = 0;
    for (i64 i = lane; i < p.width; i += 32) s += (double)({x_at});
    const double mean = k_warp_sum(s) / n;
    double v = 0;
    for (i64 i = lane; i < p.width; i += 32) {{
      const double d = (double)({x_at}) - mean;
      v += d * d;
    }}
    const double rstd = 1.0 / sqrt(k_warp_sum(v) / n + p.epsilon);
    double s1 = 0, s2 = 0;
    for (i64 i = lane; i < p.width; i += 32) {{
      const double gx = (double)({g_at}) * (double)({gamma_at});
      s1 += gx;
      s2 += gx * (((double)({x_at}) - mean) * rstd);
    }}
    const double m1 = k_warp_sum(s1) / n, m2 = k_warp_sum(s2) / n;
    for (i64 i = lane; i < p.width; i += 32) {{
      const double gi = (double)({g_at});
      const double normed = ((double)({x_at}) - mean) * rstd;
      const double value = rstd * (gi * (double)({gamma_at}) - m1 - normed * m2);
      dx[i] = {store_dx};
      const double product = normed * gi;
      xg[i] = {store_xg};
    }}
  }}
}}
)CUDA",
      "prelude"_a = kernel_prelude(), "t"_a = storage_type(dtype), "xg_t"_a = storage_type(xg),
      "x_at"_a = load("x[i]"), "g_at"_a = load("g[i]"),
      "gamma_at"_a = load("gamma[i * p.gamma_stride]"),
      "store_dx"_a = store_expression(dtype, convert_expression(DType::F64, dtype, "value")),
      "store_xg"_a = store_expression(xg, convert_expression(DType::F64, xg, "product")));
}

}  // namespace kiln::cuda
