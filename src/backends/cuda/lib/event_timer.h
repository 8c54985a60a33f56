// Times work on a CUDA stream with two events, for the autotuners (lt_autotune.cpp: cuBLASLt's
// algorithms; conv_route.cpp: cuDNN against kiln's own convolution). Measuring synchronises the
// stream, so callers never time inside a CUDA graph capture.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>

namespace kiln::cuda::lib {

class EventTimer {
 public:
  explicit EventTimer(const char* op);
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  // Seconds per call of run: one call first (kernels compiled and caches warm), then the mean of
  // `repeats` calls between the two events. stream() is where the events go once run has queued
  // its work (the plugin hands its launch queue to the driver there).
  double seconds(const std::function<void()>& run, const std::function<cudaStream_t()>& stream,
                 int repeats = 3);

 private:
  const char* op_;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

}  // namespace kiln::cuda::lib
