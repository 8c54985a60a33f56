// KILN_CUDA_TRACE=1: where a program's host time goes on cuda when it should only be queueing
// work. Each wait of the host for the device or the driver of 0.1 ms or more (a stream's or an
// event's synchronisation, the allocator asking the driver for memory or giving its cache back,
// an autotuner timing candidates, a full launch ring while the device is behind, a drain of the
// ring before other work on the stream) and each fused group planned anew (its kernels chosen by
// capturing its ops, not replayed from a plan) prints one line on stderr naming the op, what it
// waited for and how long. KILN_CUDA_TRACE=launches adds a line for each kernel kiln launches
// (not the libraries' own): the op, the kernel and its grid, in launch order, so a profiler's
// list of kernels (Nsight Compute's, in the same order) can be matched with the ops behind them.
// Off (a test of a flag read once) otherwise.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace kiln::cuda {

inline bool host_trace_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("KILN_CUDA_TRACE");
    return v != nullptr && *v != '\0' && *v != '0';
  }();
  return enabled;
}

inline bool launch_trace_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("KILN_CUDA_TRACE");
    return v != nullptr && std::string_view(v) == "launches";
  }();
  return enabled;
}

// Times its scope and prints "kiln cuda: OP WHAT took X ms" when tracing and at least 0.1 ms.
class HostTrace {
 public:
  HostTrace(const char* op, const char* what) : op_(op), what_(what) {
    if (host_trace_enabled()) start_ = std::chrono::steady_clock::now();
  }
  ~HostTrace() {
    if (!host_trace_enabled()) return;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
            .count();
    if (ms >= 0.1) std::fprintf(stderr, "kiln cuda: %s %s took %.3f ms\n", op_, what_, ms);
  }
  HostTrace(const HostTrace&) = delete;
  HostTrace& operator=(const HostTrace&) = delete;

 private:
  const char* op_;
  const char* what_;
  std::chrono::steady_clock::time_point start_{};
};

}  // namespace kiln::cuda
