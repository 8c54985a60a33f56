#include "backends/cuda/lib/event_timer.h"

#include "backends/cuda/check.h"
#include "backends/cuda/host_trace.h"

namespace kiln::cuda::lib {

EventTimer::EventTimer(const char* op) : op_(op) {
  KILN_CUDA_CHECK(op, cudaEventCreate(&start_));
  if (const cudaError_t status = cudaEventCreate(&stop_); status != cudaSuccess) {
    cudaEventDestroy(start_);
    KILN_CUDA_CHECK(op, status);
  }
}

EventTimer::~EventTimer() {
  cudaEventDestroy(start_);
  cudaEventDestroy(stop_);
}

double EventTimer::seconds(const std::function<void()>& run,
                           const std::function<cudaStream_t()>& stream, int repeats) {
  HostTrace trace(op_, "autotuner timing a candidate");
  run();
  KILN_CUDA_CHECK(op_, cudaEventRecord(start_, stream()));
  for (int r = 0; r < repeats; ++r) run();
  KILN_CUDA_CHECK(op_, cudaEventRecord(stop_, stream()));
  KILN_CUDA_CHECK(op_, cudaEventSynchronize(stop_));
  float ms = 0;
  KILN_CUDA_CHECK(op_, cudaEventElapsedTime(&ms, start_, stop_));
  return ms * 1e-3 / repeats;
}

}  // namespace kiln::cuda::lib
