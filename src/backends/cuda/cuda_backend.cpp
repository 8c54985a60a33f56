#include "backends/cuda/cuda_backend.h"

namespace kiln::cuda {

CudaBackend::CudaBackend(int index) : runtime_(index) {}

DTypeUsageSet CudaBackend::dtype_usage(DType dtype) const {
  // QFloat tensors hold a scheme's blocks (cuda_quant_tensor.h): stored, and read by the products,
  // embedding and dequantize; every other op sees them dequantized.
  if (dtype == DType::QFloat) return {DTypeUsage::Storage};
  DTypeUsageSet usage{DTypeUsage::Storage, DTypeUsage::Arithmetic};
  // Tensor cores: f16 and bf16 from sm_70/sm_80, f32 through tf32 from sm_80.
  const int major = runtime_.context.major();
  const bool accelerated = (dtype == DType::F16 && major >= 7) ||
                           ((dtype == DType::BF16 || dtype == DType::F32) && major >= 8);
  if (accelerated) usage.insert(DTypeUsage::Accelerated);
  return usage;
}

void CudaBackend::seed(std::uint64_t seed) {
  seed_.store(seed);
  counter_.store(0);
}

void CudaBackend::sync() { runtime_.context.synchronize("sync"); }

void CudaBackend::flush() {
  // Kernels are submitted as they are launched; nothing is held back.
}

}  // namespace kiln::cuda
