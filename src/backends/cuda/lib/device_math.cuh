// Device-side arithmetic shared by kiln_cuda_lib's kernels: the type a dtype computes in (float
// for the 16-bit floats and f32, double for f64, as the CPU computes them) and the activations of
// the products' epilogues. Internal to kiln_cuda_lib.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/lib/matmul_epilogue.h"

namespace kiln::cuda::lib {

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

}  // namespace kiln::cuda::lib
