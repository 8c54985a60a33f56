// One GPU as the backend sees it: the driver's primary context (shared with the CUDA runtime,
// so cuBLASLt and CUB run in the same context), one stream on which every op of the device is
// queued in order, and the deferred-error channel through which kernels report failures such
// as an integer division by zero.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/dispatcher.h"

namespace kiln::cuda {

class Context {
 public:
  explicit Context(int index);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int index() const noexcept { return index_; }
  CUdevice device() const noexcept { return device_; }
  CUcontext context() const noexcept { return context_; }
  // The stream, once every launch queued by launch() has been handed to the driver (see
  // dispatcher.h): whatever the caller queues on it next comes after them.
  CUstream stream() noexcept {
    wait_out_capture();
    dispatcher_->drain();
    dispatcher_->note_other_work();
    return stream_;
  }
  // Queues a launch of function (1-D grid) on the stream, after everything queued before.
  // A footprint (the memory it touches) lets a captured launch run beside others
  // (Dispatcher::submit).
  void launch(const char* op, CUfunction function, unsigned blocks, unsigned threads,
              unsigned shared_bytes, const void* params, std::size_t bytes,
              const LaunchFootprint* footprint = nullptr, LaunchOrder order = LaunchOrder::After) {
    wait_out_capture();
    dispatcher_->submit(op, function, blocks, threads, shared_bytes, params, bytes, footprint,
                        order);
  }
  int major() const noexcept { return major_; }
  int minor() const noexcept { return minor_; }
  int sm_count() const noexcept { return sm_count_; }
  // "sm_90"
  std::string arch() const { return "sm_" + std::to_string(major_ * 10 + minor_); }
  // The target NVRTC compiles for: arch(), with the architecture-specific features (the "a"
  // targets: wgmma and setmaxnreg on 9.0) where the device has them. Such code runs on this
  // exact architecture only, which is the only one a run-time compile is for.
  std::string compile_arch() const { return arch() + (major_ == 9 && minor_ == 0 ? "a" : ""); }
  // Makes the primary context current on the calling thread (cheap when it already is).
  void make_current() const;

  // ---- stream capture (kiln/graph.h): the work queued between begin and end, as a CUDA graph ----
  // Relaxed mode: kernels are compiled and modules loaded while the region runs.
  void begin_capture(const char* op);
  // The graph captured; null when keep is false (it is discarded). ExecutionError when the driver
  // invalidated the capture.
  CUgraph end_capture(bool keep, const char* op);
  bool capturing() const noexcept { return capturing_.load(std::memory_order_acquire); }
  // Whether the calling thread is the one capturing (its ops belong to the graph).
  bool capturing_here() const noexcept {
    return capturing() && capture_thread_ == std::this_thread::get_id();
  }
  // Another thread's work must not enter a capture of the stream (a data loader's batch made
  // while the training thread captures its step): it waits until the capture ends.
  void wait_out_capture() noexcept {
    if (capturing() && capture_thread_ != std::this_thread::get_id()) [[unlikely]]
      wait_for_capture_end();
  }

  // ---- split-k counters ----
  // kSplitCounters u32 counters, all 0 (made with the context, so never inside a capture). A
  // kernel that splits its sums over blocks takes a ticket per output tile and the last block
  // sets the counter back to 0, so every launch finds them 0: the stream runs one launch at a
  // time.
  static constexpr std::size_t kSplitCounters = 1 << 14;
  CUdeviceptr split_counters() const noexcept { return split_counters_; }

  // ---- deferred errors ----
  // A token a kernel writes to error_word() when it fails; the op name is reported at the read.
  std::uint32_t error_token(const char* op, const char* what);
  // Device address of the error word (mapped pinned host memory, 0 = no error).
  CUdeviceptr error_word() const noexcept { return error_word_device_; }
  // Records the name of a launched op (kept until the next successful synchronisation) so a
  // fault that poisons the context can say which ops were in flight. Lock-free: it runs on
  // every launch. The names are a diagnostic; threads launching at once may reorder them.
  void note_launch(const char* op) noexcept {
    const std::uint32_t count = launch_count_.load(std::memory_order_relaxed);
    if (count > 0 && launched_[(count - 1) % kLaunchNames].load(std::memory_order_relaxed) == op)
      return;
    const std::uint32_t slot = launch_count_.fetch_add(1, std::memory_order_relaxed);
    launched_[slot % kLaunchNames].store(op, std::memory_order_relaxed);
  }
  // A failure of op found on the host after its work was queued (an NCCL call its watchdog
  // aborted): the next synchronisation or read on the device throws ExecutionError with what.
  void report_failure(const char* op, const std::string& what);
  // Waits for the stream and throws ExecutionError naming the op that failed, if one did.
  void synchronize(const char* op);
  // After an event or stream wait: throws if a kernel reported an error (clears it).
  void throw_pending(const char* op);
  // Names of the ops launched since the last successful synchronisation.
  std::string in_flight() const;

 private:
  void forget_launches() noexcept;

  int index_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  int major_ = 0, minor_ = 0, sm_count_ = 0;
  volatile std::uint32_t* error_word_host_ = nullptr;
  CUdeviceptr error_word_device_ = 0;
  CUdeviceptr split_counters_ = 0;
  mutable std::mutex mutex_;
  std::vector<std::string> tokens_;  // token - 1 -> "op: what"
  // The most recent launched op names (distinct from their predecessor), a ring.
  static constexpr std::uint32_t kLaunchNames = 16;
  std::array<std::atomic<const char*>, kLaunchNames> launched_{};
  std::atomic<std::uint32_t> launch_count_{0};
  std::unique_ptr<Dispatcher> dispatcher_;
  void wait_for_capture_end() noexcept;

  std::atomic<bool> capturing_{false};
  std::thread::id capture_thread_;
  std::mutex capture_mutex_;
  std::condition_variable capture_ended_;
};

// Driver initialisation once per process; false with the reason when there is no driver/GPU.
bool driver_ready(std::string* reason);

}  // namespace kiln::cuda
