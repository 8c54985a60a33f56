// Source generation of the layer_norm kernel (no driver calls: the tests compile it with NVRTC).
#include <fmt/format.h>

#include "backends/cuda/kernel_source.h"
#include "backends/cuda/norm.h"

namespace kiln::cuda {

using namespace fmt::literals;

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

}  // namespace kiln::cuda
