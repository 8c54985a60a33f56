// Everything one GPU needs to run kernels: context and stream, allocator, kernel compiler.
// Owned by the CudaBackend of that GPU; kernel families take it by reference.
#pragma once

#include <cuda.h>

#include <memory>

#include "backends/cuda/allocator.h"
#include "backends/cuda/compiler.h"
#include "backends/cuda/context.h"
#include "backends/cuda/cuda_tensor.h"

namespace kiln::cuda {

struct Runtime {
  explicit Runtime(int index)
      : context(index), allocator(context), compiler(context), device_(Device::cuda(index)) {}
  Context context;
  Allocator allocator;
  Compiler compiler;
  Device device() const noexcept { return device_; }

  // A fresh contiguous tensor (contents uninitialised).
  TensorPtr make_tensor(DType dtype, const Shape& shape, const char* op);
  // Launches function with one parameter block on the device's stream, 1-D grid.
  void launch(const char* op, CUfunction function, unsigned blocks, unsigned threads,
              void* params, unsigned shared_bytes = 0);
  // Blocks for a grid-stride loop over n items.
  unsigned blocks_for(std::int64_t n, unsigned threads) const;

 private:
  Device device_;
};

}  // namespace kiln::cuda
