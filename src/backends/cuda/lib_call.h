// What the op files that call kiln_cuda_lib (src/backends/cuda/lib: cuBLASLt matmul, CUB sort and
// select) share: raw device addresses of tensors, the device's stream with its context current,
// workspaces from the backend's caching allocator, moving a dim last and back, and the compute
// mode of products.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/allocator.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernel_capture.h"
#include "backends/cuda/lib/matmul.h"

namespace kiln::cuda {

// Device address of element [0, 0, ...] of t, plus `elements` (may be negative) as a pointer.
inline void* device_address(const CudaTensor& t, std::int64_t elements = 0) {
  const auto bytes = elements * static_cast<std::int64_t>(dtype_size(t.dtype()));
  return reinterpret_cast<void*>(
      static_cast<std::uintptr_t>(t.data() + static_cast<CUdeviceptr>(bytes)));
}

// The device's stream, with the primary context made current for cudart and the libraries
// (CUstream and cudaStream_t are the same type). A library call is never part of a kernel
// capture (its operands would be placeholders without memory): under one, it refuses.
inline cudaStream_t lib_stream(Runtime& runtime) {
  KernelCapture::refuse_if_active();
  runtime.context.make_current();
  return runtime.context.stream();
}

// How a product of dtype runs on this device: f32 on tf32 tensor cores when the device's switch
// allows it (Device::set_allow_tf32, read at each op so a change applies to the next one), every
// other dtype in its own precision.
inline lib::MatmulCompute product_compute(const Runtime& runtime, DType dtype) {
  return dtype == DType::F32 && runtime.device().allow_tf32() ? lib::MatmulCompute::Tf32
                                                              : lib::MatmulCompute::Default;
}

// Device scratch memory from the backend's allocator for the duration of one op: handed back to
// the cache when it goes out of scope, which is safe because every op of the device is queued
// on the one stream (a later op that reuses the block runs after this op's kernels).
class Workspace : public Storage {
 public:
  Workspace(Runtime& runtime, std::size_t bytes, const char* op)
      : Storage(runtime.allocator, bytes, op) {}
  void* get() const noexcept {
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(pointer()));
  }
};

// Axes that move dim last (the others keep their order), and the axes that move it back.
inline Axes dim_last_axes(std::size_t rank, std::int64_t dim) {
  Axes axes;
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(rank); ++i) {
    if (i != dim) axes.push_back(i);
  }
  axes.push_back(dim);
  return axes;
}
inline Axes dim_back_axes(std::size_t rank, std::int64_t dim) {
  const auto last = static_cast<std::int64_t>(rank) - 1;
  Axes axes(rank);
  for (std::int64_t i = 0; i <= last; ++i) {
    axes[static_cast<std::size_t>(i)] = i < dim ? i : (i == dim ? last : i - 1);
  }
  return axes;
}

}  // namespace kiln::cuda
