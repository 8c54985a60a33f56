// A strided elementwise pass over C: optional zeroing, bias per column, activation. Computes in
// float (double for f64), as the CPU's gelu and relu do for these dtypes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "backends/cuda/check.h"
#include "backends/cuda/lib/matmul_epilogue.h"

namespace kiln::cuda::lib {

namespace {

template <class T>
struct Compute {
  using type = float;
  __device__ static float load(T v) { return static_cast<float>(v); }
  __device__ static T store(float v) { return static_cast<T>(v); }
};
template <>
struct Compute<double> {
  using type = double;
  __device__ static double load(double v) { return v; }
  __device__ static double store(double v) { return v; }
};
template <>
struct Compute<__half> {
  using type = float;
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
};
template <>
struct Compute<__nv_bfloat16> {
  using type = float;
  __device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};

template <class C>
__device__ C activate(C x, Activation activation) {
  switch (activation) {
    case Activation::Relu:
      return x < C(0) ? C(0) : x;
    case Activation::Gelu:
      // x Φ(x) = x erfc(-x / sqrt 2) / 2: no cancellation in the left tail (cpu_activation.cpp).
      if (isinf(x) && x < C(0)) return C(0);
      return x * C(0.5) * erfc(-x * C(0.70710678118654752440));
    case Activation::GeluTanh: {
      const C inner = C(0.79788456080286535588) * (x + C(0.044715) * x * x * x);
      return C(0.5) * x * (C(1) + tanh(inner));
    }
    default:
      return x;
  }
}

template <class T>
__global__ void epilogue_kernel(T* c, const T* bias, std::int64_t m, std::int64_t n,
                                std::int64_t batch, std::int64_t rs, std::int64_t cs,
                                std::int64_t bs, Activation activation, bool zero_first) {
  using C = typename Compute<T>::type;
  const std::int64_t total = batch * m * n;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += step) {
    const std::int64_t j = e % n;
    const std::int64_t i = (e / n) % m;
    const std::int64_t b = e / (n * m);
    T* at = c + b * bs + i * rs + j * cs;
    C x = zero_first ? C(0) : Compute<T>::load(*at);
    if (bias != nullptr) x += Compute<T>::load(bias[j]);
    *at = Compute<T>::store(activate(x, activation));
  }
}

template <class T>
void launch(const MatmulDesc& d, void* c, const void* bias, Activation activation, bool zero_first,
            cudaStream_t stream) {
  const std::int64_t total = d.batch * d.m * d.n;
  const int blocks = static_cast<int>(std::clamp<std::int64_t>((total + 255) / 256, 1, 132 * 16));
  epilogue_kernel<T><<<blocks, 256, 0, stream>>>(static_cast<T*>(c), static_cast<const T*>(bias),
                                                 d.m, d.n, d.batch, d.c.row_stride, d.c.col_stride,
                                                 d.c.batch_stride, activation, zero_first);
  KILN_CUDA_CHECK("matmul", cudaGetLastError());
}

}  // namespace

void apply_epilogue(const MatmulDesc& desc, void* c, const void* bias, Activation activation,
                    bool zero_first, cudaStream_t stream) {
  if (desc.batch * desc.m * desc.n == 0) return;
  switch (desc.dtype) {
    case DType::F64:
      return launch<double>(desc, c, bias, activation, zero_first, stream);
    case DType::F32:
      return launch<float>(desc, c, bias, activation, zero_first, stream);
    case DType::F16:
      return launch<__half>(desc, c, bias, activation, zero_first, stream);
    case DType::BF16:
      return launch<__nv_bfloat16>(desc, c, bias, activation, zero_first, stream);
    default:
      break;
  }
  detail::fail<UnsupportedDType>("matmul", "no epilogue for dtype ", dtype_name(desc.dtype));
}

}  // namespace kiln::cuda::lib
