// Generated source of the integer matmul kernel (cuda_matmul.cpp). cuBLASLt has no wrap-around
// integer product, so integer dtypes get a plain kernel with the CPU backend's semantics: the
// products and sums wrap in the unsigned type of at least 32 bits, truncated to the dtype at the
// end (src/backends/cpu/cpu_matmul.cpp). A thread per output element; operands at any strides,
// batch dims as up to 12 (size, stride of A, stride of B) groups. Header-only so the codegen test
// compiles it with NVRTC without a GPU.
#pragma once

#include <fmt/format.h>

#include <string>

#include "backends/cuda/kernel_source.h"

namespace kiln::cuda {

// Mirrored by struct IntMatmulParams in cuda_matmul.cpp: same members, same order.
inline constexpr const char* kIntMatmulParams = R"CUDA(
struct P {
  i64 m, n, k, total;
  i64 a_rs, a_cs, b_rs, b_cs;
  int groups, pad;
  i64 sizes[12]; i64 a_bs[12]; i64 b_bs[12];
  u64 a, b, out;
};
)CUDA";

inline constexpr const char* kIntMatmul = R"CUDA(
extern "C" __global__ void kiln_int_matmul(P p) {
  const i64 step = (i64)gridDim.x * blockDim.x;
  for (i64 o = (i64)blockIdx.x * blockDim.x + threadIdx.x; o < p.total; o += step) {
    const i64 j = o % p.n;
    const i64 r = o / p.n;
    const i64 i = r % p.m;
    i64 batch = r / p.m;
    i64 oa = i * p.a_rs, ob = j * p.b_cs;
    for (int g = p.groups - 1; g >= 0; --g) {
      const i64 q = batch % p.sizes[g];
      batch /= p.sizes[g];
      oa += q * p.a_bs[g];
      ob += q * p.b_bs[g];
    }
    const T* a = (const T*)p.a + oa;
    const T* b = (const T*)p.b + ob;
    U acc = 0;
    for (i64 q = 0; q < p.k; ++q) acc += (U)a[q * p.a_cs] * (U)b[q * p.b_rs];
    ((T*)p.out)[o] = (T)acc;
  }
}
)CUDA";

// T is the dtype's storage, U the unsigned type the products and sums wrap in.
inline std::string int_matmul_source(DType dtype) {
  using namespace fmt::literals;
  return fmt::format("{prelude}{params}typedef {T} T;\ntypedef {U} U;\n{kernel}",
                     "prelude"_a = kernel_prelude(), "params"_a = kIntMatmulParams,
                     "T"_a = storage_type(dtype),
                     "U"_a = dtype_size(dtype) <= 4 ? "unsigned" : "u64", "kernel"_a = kIntMatmul);
}

}  // namespace kiln::cuda
