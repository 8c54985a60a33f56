// The tensor cores' 16-bit product, one text for two compilers: the quantized kernels
// (quant_kernels.h) and flash attention (attention_kernels.h) both call tc_mma, NVRTC compiling
// this text ahead of theirs (CMake embeds it as kTensorCoreSource), and the host tests defining
// tc_host_mma on their emulated grid (tests/gpu/kernel_emulator.cpp).
//
// c += A b, PTX's mma.m16n8k16.row.col with f32 accumulators and bf16 (kBf16) or f16 inputs:
// lane 4g + t holds A (16 x 16, row-major) elements (g, 2t..2t+1) in a[0], (g + 8, 2t..) in a[1],
// (g, 2t + 8..) in a[2], (g + 8, 2t + 8..) in a[3]; B (16 x 8) elements (2t..2t+1, g) in b0 and
// (2t + 8.., g) in b1; C (16 x 8) elements (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).
#ifndef KILN_CUDA_TENSOR_CORE_H
#define KILN_CUDA_TENSOR_CORE_H

namespace kiln::cuda::tensor_core {

#ifdef __CUDACC_RTC__
template <bool kBf16>
__device__ __forceinline__ void tc_mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}
#else
void tc_host_mma(float* c, const unsigned* a, unsigned b0, unsigned b1, bool bf16);
template <bool kBf16>
inline void tc_mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  tc_host_mma(c, a, b0, b1, kBf16);
}
#endif

}  // namespace kiln::cuda::tensor_core

#endif  // KILN_CUDA_TENSOR_CORE_H
