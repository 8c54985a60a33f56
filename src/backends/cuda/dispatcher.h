// Asynchronous dispatch of kernel launches. On the machines we measure, the driver's
// cuLaunchKernel alone costs 3.4-4.1 us of host time (docs/cuda-backend-notes.md), several times
// kiln's own work for a small op. So the calling thread copies a launch into a ring and returns,
// and a launcher thread per GPU hands the ring to the driver in order: the caller's next op
// overlaps the driver's work on the previous one (the pipelining burn's compute channels and JAX's
// async dispatch do too).
//
// The stream still sees every op in program order. Anything else queued on it (copies, events,
// library calls such as cuBLASLt and CUB, synchronisation) first drains the ring: Context::stream()
// does, so no caller can forget. A draining thread launches whatever is left itself instead of
// waiting for the launcher to wake. A launch the driver refuses is recorded and thrown, naming the
// op, at the next launch or read.
//
// At exit the ring is closed and the launcher stopped before any static destructor or atexit
// handler runs (shutdown.h says how and why).
//
// KILN_CUDA_DISPATCH=inline launches on the calling thread instead (no thread; for debugging and
// for measuring the difference).
#pragma once

#include <cuda.h>
#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "backends/cuda/launch_footprint.h"

namespace kiln::cuda {

// Whether a launch may overlap the launch before it on the stream (Hopper's programmatic
// dependent launch: the kernel is launched as the one ahead of it finishes, its blocks start
// early and wait at griddepcontrol.wait until that one has completed and its writes are visible).
// A kernel launched so executes griddepcontrol.launch_dependents only after its own wait, so
// everything before the launch ahead of it has completed by the time the next one starts.
//   After: the usual launch, after everything queued before has completed.
//   Overlapping: the kernel waits before it reads or writes any memory (generated kernels start
//     with k_grid_dependency(), kernel_source.cpp's prelude); it may follow any Overlapping
//     launch early. A chain of them, as a captured training step has, then does not wait out
//     each launch's latency in turn.
//   OverlappingWeightReader: the kernel reads a quantized weight before its wait (so its first
//     tiles stream in while the launch ahead finishes) and writes no weight; it may follow only
//     another such launch early, whose kernels write no weight either (an Overlapping copy may
//     have written any memory, a weight's bytes included).
// Anything else queued on the stream (a copy, a library call, an event: Context::stream()) makes
// the next launch wait as usual. KILN_CUDA_OVERLAP=0 launches everything After (read once).
enum class LaunchOrder : std::uint8_t { After, Overlapping, OverlappingWeightReader };

class Dispatcher {
 public:
  // Largest parameter block a kernel of kiln takes (a softmax over a fused chain's is 1136: its
  // own parameters, then the chain's).
  static constexpr std::size_t kMaxParamBytes = 1152;

  // programmatic: the device can launch a kernel before the one ahead of it ends (Overlapping
  // launches; compute capability 9.0 and up).
  Dispatcher(CUcontext context, CUstream stream, int device_index, bool programmatic = false);
  ~Dispatcher();  // stops the launcher (stop)
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // Queues a launch of function (1-D grid) with one parameter block of `bytes` bytes, copied.
  // Throws ExecutionError first if an earlier launch was refused. With a footprint (the memory
  // the kernel touches, launch_footprint.h) a launch inside a CUDA graph capture may become a
  // sibling of the launches before it that it does not conflict with, where branches() allows.
  void submit(const char* op, CUfunction function, unsigned blocks, unsigned threads,
              unsigned shared_bytes, const void* params, std::size_t bytes,
              const LaunchFootprint* footprint = nullptr, LaunchOrder order = LaunchOrder::After);
  // Something other than a launch was queued on the stream (Context::stream()): the next
  // Overlapping launch waits for it as usual.
  void note_other_work() noexcept {
    previous_order_.store(LaunchOrder::After, std::memory_order_relaxed);
  }
  // KILN_GRAPH_BRANCHES=1: captured launches with footprints run side by side where they can
  // (off by default until measured on a GPU). Read once.
  static bool branches();
  // Returns once every submitted launch was handed to the driver. Never throws (it runs on
  // noexcept paths such as the allocator's); refusals stay recorded for throw_refused.
  void drain() noexcept;
  // Throws ExecutionError naming the op whose launch the driver refused, if one was (once).
  void throw_refused(const char* op);
  // Closes the ring, lets the launcher hand every queued launch to the driver, and joins it;
  // later launches are made on the caller's thread. Idempotent. In a forked child, which has no
  // launcher thread, it only switches to launching on the caller's thread. Run at exit
  // (shutdown.h); the backends themselves are never destroyed.
  void stop() noexcept;
  // Returns once every launch queued before the call is with the driver, without calling the
  // driver on this thread (shutdown.h: a thread that queued launches ends).
  void wait_handed_over() noexcept;

 private:
  struct Launch {
    CUfunction function;
    const char* op;
    unsigned blocks, threads, shared_bytes;
    alignas(16) unsigned char params[kMaxParamBytes];
    LaunchFootprint footprint;  // count 0: none given
    LaunchOrder order;
  };
  static constexpr std::uint64_t kSlots = 1024;

  // Copies a launch into the ring; false once the ring is closed (nothing was queued).
  bool enqueue(const char* op, CUfunction function, unsigned blocks, unsigned threads,
               unsigned shared_bytes, const void* params, std::size_t bytes,
               const LaunchFootprint* footprint, LaunchOrder order);
  // Launches on the calling thread, after whatever is still queued.
  void launch_inline(const char* op, CUfunction function, unsigned blocks, unsigned threads,
                     unsigned shared_bytes, const void* params, const LaunchFootprint* footprint,
                     LaunchOrder order) noexcept;
  bool launch_next() noexcept;    // the oldest queued launch, if any; false when none is queued
  bool launch_locked() noexcept;  // launch_next with consumers_ held
  void launch_now(const char* op, CUfunction function, unsigned blocks, unsigned threads,
                  unsigned shared_bytes, void* params, const LaunchFootprint* footprint,
                  LaunchOrder order) noexcept;
  // launch_now inside an active capture for a launch with a known footprint: a sibling of the
  // current group where it admits it, else the first of a new group. False when the stream is not
  // capturing (nothing launched).
  bool launch_captured(const char* op, CUfunction function, unsigned blocks, unsigned threads,
                       unsigned shared_bytes, void* params,
                       const LaunchFootprint& footprint) noexcept;
  void end_branch_group() noexcept;  // no group: the next captured launch starts one
  void refuse(const char* op, CUresult status) noexcept;  // records the first refusal
  void run() noexcept;                                    // the launcher thread
  void close_ring() noexcept;  // the launcher's last act: nothing is queued after it

  CUcontext context_;
  CUstream stream_;
  int device_index_;
  bool programmatic_ = false;  // the device has programmatic dependent launch (9.0 and up)
  // The order of the last launch handed to the driver; After when other work was queued since.
  std::atomic<LaunchOrder> previous_order_{LaunchOrder::After};
  std::atomic<bool> inline_{false};
  std::array<Launch, kSlots> ring_;
  std::atomic<std::uint64_t> head_{0};  // next to launch
  std::atomic<std::uint64_t> tail_{0};  // next to fill
  std::mutex producers_;                // threads submitting at once take turns
  std::mutex consumers_;                // the launcher and draining threads take turns
  std::atomic<std::uint32_t> wake_{0};  // the parked launcher waits on this word
  std::atomic<bool> parked_{false};
  std::atomic<bool> stop_{false};    // asks the launcher to empty the ring and end
  std::atomic<bool> closed_{false};  // set by the launcher; read by producers under producers_
  // The first refused launch, until thrown.
  std::atomic<bool> refused_{false};
  const char* refused_op_ = nullptr;
  CUresult refused_status_ = CUDA_SUCCESS;
  // The capture's current group of siblings (launch_captured), under consumers_: the nodes they
  // all come after, their own nodes, their footprints.
  cuuint64_t branch_capture_ = 0;  // the capture they belong to (its id)
  std::vector<CUgraphNode> branch_base_, branch_nodes_;
  SiblingGroup branch_group_;
  std::mutex lifecycle_;  // stop() from several threads at once
  pid_t owner_;           // the process the launcher thread runs in (not a forked child)
  std::thread launcher_;
};

}  // namespace kiln::cuda
