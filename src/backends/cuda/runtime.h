// Everything one GPU needs to run kernels: context and stream, allocator, kernel compiler.
// Owned by the CudaBackend of that GPU; kernel families take it by reference.
#pragma once

#include <cuda.h>

#include <memory>
#include <type_traits>

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
  // Launches function with one parameter block (copied) on the device's stream, 1-D grid. With
  // the memory the kernel reads and writes (footprint), inside a CUDA graph capture it may run
  // beside the launches before it that it does not conflict with (launch_footprint.h). An
  // Overlapping kernel may start as the launch before it finishes (dispatcher.h's LaunchOrder
  // says what its code must do for that).
  template <class Params>
  void launch(const char* op, CUfunction function, unsigned blocks, unsigned threads,
              const Params& params, unsigned shared_bytes = 0,
              const LaunchFootprint* footprint = nullptr, LaunchOrder order = LaunchOrder::After) {
    static_assert(!std::is_pointer_v<Params>, "pass the parameter struct, not its address");
    static_assert(sizeof(Params) <= Dispatcher::kMaxParamBytes, "grow Dispatcher::kMaxParamBytes");
    launch_bytes(op, function, blocks, threads, &params, sizeof(Params), shared_bytes, footprint,
                 order);
  }
  // Blocks for a grid-stride loop over n items.
  unsigned blocks_for(std::int64_t n, unsigned threads) const;
  // Lets function launch with `shared` bytes of dynamic shared memory: past 48 KiB a kernel must
  // ask for it, at every call (a handle the driver gives again after a module reload starts
  // without it).
  static void allow_shared(CUfunction function, unsigned shared, const char* op);

 private:
  void launch_bytes(const char* op, CUfunction function, unsigned blocks, unsigned threads,
                    const void* params, std::size_t bytes, unsigned shared_bytes,
                    const LaunchFootprint* footprint, LaunchOrder order);
  Device device_;
};

}  // namespace kiln::cuda
