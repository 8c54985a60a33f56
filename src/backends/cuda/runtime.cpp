#include "backends/cuda/runtime.h"

#include <algorithm>
#include <cstdio>

#include "backends/cuda/check.h"
#include "backends/cuda/host_trace.h"
#include "backends/cuda/kernel_capture.h"
#include "core/checked.h"

namespace kiln::cuda {

TensorPtr Runtime::make_tensor(DType dtype, const Shape& shape, const char* op) {
  // Every CUDA allocation passes here: the byte count is checked arithmetic (an absurd or
  // wrapping shape is OutOfMemory / InvalidArgument, never a short buffer).
  const std::size_t bytes = checked::dense_bytes(shape, dtype, op);
  // Under a kernel capture (cuda_fused.cpp) an op's result is a placeholder until the fused
  // kernel writes it.
  if (KernelCapture* capture = KernelCapture::active())
    return capture->placeholder(dtype, shape, device_);
  auto storage = std::make_shared<Storage>(allocator, bytes, op);
  return std::make_shared<CudaTensor>(dtype, shape, device_, std::move(storage));
}

void Runtime::launch_bytes(const char* op, CUfunction function, unsigned blocks, unsigned threads,
                           const void* params, std::size_t bytes, unsigned shared_bytes,
                           const LaunchFootprint* footprint, LaunchOrder order) {
  KernelCapture::refuse_if_active();  // only elementwise kernels are captured
  // Module loads and allocations around a launch expect the context current on this thread.
  context.make_current();
  if (launch_trace_enabled()) {
    const char* name = "?";
    if (cuFuncGetName(&name, function) != CUDA_SUCCESS) name = "?";
    std::fprintf(stderr, "kiln cuda launch: %s %s %ux%u\n", op, name, blocks, threads);
  }
  context.launch(op, function, blocks, threads, shared_bytes, params, bytes, footprint, order);
  context.note_launch(op);
}

void Runtime::allow_shared(CUfunction function, unsigned shared, const char* op) {
  if (shared > 48 * 1024) {
    KILN_CUDA_CHECK(op,
                    cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       static_cast<int>(shared)));
  }
}

unsigned Runtime::blocks_for(std::int64_t n, unsigned threads) const {
  const std::int64_t wanted = (n + threads - 1) / threads;
  // Enough blocks to fill every SM several times over; the grid-stride loop does the rest.
  const std::int64_t cap = std::int64_t(context.sm_count()) * 32;
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min(wanted, cap)));
}

}  // namespace kiln::cuda
