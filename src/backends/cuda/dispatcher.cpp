#include "backends/cuda/dispatcher.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>

#include "backends/cuda/host_trace.h"
#include "backends/cuda/shutdown.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::cuda {

namespace {

// How long the launcher keeps polling an empty ring before it parks: ops that arrive closer
// together than this never pay for a wake-up.
constexpr auto kSpin = std::chrono::microseconds(500);

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// A two-way switch in the environment: false when unset or `usual`, true when `other`; any other
// value is an InvalidArgument naming the variable.
bool switched(const char* variable, std::string_view usual, std::string_view other) {
  const char* mode = std::getenv(variable);
  if (mode == nullptr || *mode == '\0' || mode == usual) return false;
  if (mode == other) return true;
  detail::fail<InvalidArgument>("cuda", variable, " is '", mode, "'; want '", usual,
                                "' (the default) or '", other, "'");
}

bool dispatch_inline() { return switched("KILN_CUDA_DISPATCH", "thread", "inline"); }

// KILN_CUDA_OVERLAP=0: every launch waits for the one before it to end (LaunchOrder::Overlapping
// ignored), for measuring what overlapping gains.
bool overlap_allowed() { return !switched("KILN_CUDA_OVERLAP", "1", "0"); }

// Makes context current on the calling thread for the scope, restoring the previous one.
class CurrentContext {
 public:
  explicit CurrentContext(CUcontext context) noexcept {
    CUcontext current = nullptr;
    if (cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == context) return;
    pushed_ = cuCtxPushCurrent(context) == CUDA_SUCCESS;
  }
  ~CurrentContext() {
    CUcontext popped = nullptr;
    if (pushed_) cuCtxPopCurrent(&popped);
  }
  CurrentContext(const CurrentContext&) = delete;
  CurrentContext& operator=(const CurrentContext&) = delete;

 private:
  bool pushed_ = false;
};

}  // namespace

Dispatcher::Dispatcher(CUcontext context, CUstream stream, int device_index, bool programmatic)
    : context_(context),
      stream_(stream),
      device_index_(device_index),
      programmatic_(programmatic && overlap_allowed()),
      inline_(dispatch_inline()),
      owner_(getpid()) {
  if (inline_.load(std::memory_order_relaxed)) return;
  launcher_ = std::thread([this] { run(); });
  shutdown::add(this);
}

Dispatcher::~Dispatcher() {
  shutdown::remove(this);  // first: the exit hooks must not reach a dispatcher being destroyed
  stop();
}

void Dispatcher::stop() noexcept {
  std::lock_guard lifecycle(lifecycle_);
  if (!launcher_.joinable()) return;
  inline_.store(true, std::memory_order_seq_cst);  // new launches go straight to the driver
  if (getpid() != owner_) {
    // A forked child: the launcher thread stayed in the parent. Forget the handle (joining it
    // would wait forever) and what the parent had queued, which is the parent's work.
    launcher_.detach();
    head_.store(tail_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return;
  }
  stop_.store(true, std::memory_order_seq_cst);
  wake_.fetch_add(1, std::memory_order_seq_cst);
  wake_.notify_one();
  launcher_.join();  // it has emptied and closed the ring (run)
}

void Dispatcher::wait_handed_over() noexcept {
  if (getpid() != owner_) return;
  const std::uint64_t target = tail_.load(std::memory_order_acquire);
  // The launcher never parks on a non-empty ring (enqueue wakes it), so this ends.
  while (head_.load(std::memory_order_acquire) < target) std::this_thread::yield();
}

bool Dispatcher::branches() {
  static const bool on = [] {
    const char* value = std::getenv("KILN_GRAPH_BRANCHES");
    return value != nullptr && std::string_view(value) == "1";
  }();
  return on;
}

void Dispatcher::submit(const char* op, CUfunction function, unsigned blocks, unsigned threads,
                        unsigned shared_bytes, const void* params, std::size_t bytes,
                        const LaunchFootprint* footprint, LaunchOrder order) {
  if (refused_.load(std::memory_order_acquire)) throw_refused(op);
  if (bytes > kMaxParamBytes) {
    detail::fail<InvalidArgument>(op, "a kernel parameter block of ", bytes,
                                  " bytes is over the dispatcher's ", kMaxParamBytes);
  }
  if (!inline_.load(std::memory_order_relaxed)) {
    shutdown::arm_this_thread();
    if (enqueue(op, function, blocks, threads, shared_bytes, params, bytes, footprint, order)) {
      return;
    }
  }
  launch_inline(op, function, blocks, threads, shared_bytes, params, footprint, order);
  if (refused_.load(std::memory_order_acquire)) throw_refused(op);
}

bool Dispatcher::enqueue(const char* op, CUfunction function, unsigned blocks, unsigned threads,
                         unsigned shared_bytes, const void* params, std::size_t bytes,
                         const LaunchFootprint* footprint, LaunchOrder order) {
  {
    std::lock_guard lock(producers_);
    // Checked under the lock the launcher takes once after closing (close_ring): a producer
    // either sees the ring closed or queues before the launcher's last pass over it.
    if (closed_.load(std::memory_order_seq_cst)) return false;
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    // A full ring: wait for the launcher to free a slot (competing with it for each launch
    // would hand the consumer lock back and forth); launch here only if it is parked, or closing
    // and so waiting for this lock.
    std::optional<HostTrace> full;
    if (tail - head_.load(std::memory_order_acquire) >= kSlots)
      full.emplace(op, "full launch ring");
    while (tail - head_.load(std::memory_order_acquire) >= kSlots) {
      if (parked_.load(std::memory_order_acquire) || closed_.load(std::memory_order_acquire)) {
        const CurrentContext current(context_);
        launch_next();
      } else {
        cpu_relax();
      }
    }
    Launch& slot = ring_[tail % kSlots];
    slot.function = function;
    slot.op = op;
    slot.blocks = blocks;
    slot.threads = threads;
    slot.shared_bytes = shared_bytes;
    slot.order = order;
    std::memcpy(slot.params, params, bytes);
    slot.footprint.count = 0;
    if (footprint != nullptr) {
      slot.footprint.overflow = footprint->overflow;
      slot.footprint.count = footprint->count;
      std::copy_n(footprint->ranges.begin(), footprint->count, slot.footprint.ranges.begin());
    }
    tail_.store(tail + 1, std::memory_order_seq_cst);
  }
  // Pairs with run(): it sets parked_ and then reads tail_; this thread set tail_ and now reads
  // parked_ (both sequentially consistent), so one of the two sees the other.
  if (parked_.load(std::memory_order_seq_cst)) {
    wake_.fetch_add(1, std::memory_order_seq_cst);
    wake_.notify_one();
  }
  return true;
}

void Dispatcher::launch_inline(const char* op, CUfunction function, unsigned blocks,
                               unsigned threads, unsigned shared_bytes, const void* params,
                               const LaunchFootprint* footprint, LaunchOrder order) noexcept {
  const CurrentContext current(context_);
  std::lock_guard lock(consumers_);
  // While the ring closes (stop) it may still hold launches: they go first, in order.
  while (launch_locked()) {
  }
  launch_now(op, function, blocks, threads, shared_bytes, const_cast<void*>(params), footprint,
             order);
}

void Dispatcher::drain() noexcept {
  // head_ moves past a launch only once cuLaunchKernel has returned (launch_next), so an empty
  // ring means every launch is with the driver.
  if (head_.load(std::memory_order_acquire) == tail_.load(std::memory_order_acquire)) return;
  const CurrentContext current(context_);
  HostTrace trace("stream", "drain of the launch ring");
  // The draining thread launches the rest itself, under one lock for the whole batch (the
  // launcher waits rather than taking turns per launch). Measured on the H200 host: waiting for
  // the launcher instead gave 4.2-4.3 us per small add end to end, this 3.7-4.0, launching on the
  // caller's thread with no launcher 4.1-4.3 (docs/cuda-backend-notes.md).
  std::lock_guard lock(consumers_);
  while (launch_locked()) {
  }
}

void Dispatcher::throw_refused(const char* op) {
  if (!refused_.load(std::memory_order_acquire)) return;
  const char* failed = nullptr;
  CUresult status = CUDA_SUCCESS;
  {
    std::lock_guard lock(consumers_);
    failed = refused_op_;
    status = refused_status_;
    refused_op_ = nullptr;
    refused_.store(false, std::memory_order_release);
  }
  const char* reason = nullptr;
  if (cuGetErrorString(status, &reason) != CUDA_SUCCESS || reason == nullptr) reason = "unknown";
  detail::fail<ExecutionError>(op, "the launch of ", failed ? failed : "an op",
                               " on cuda:", device_index_,
                               " was refused: cuLaunchKernel failed: ", reason);
}

bool Dispatcher::launch_next() noexcept {
  std::lock_guard lock(consumers_);
  return launch_locked();
}

bool Dispatcher::launch_locked() noexcept {
  const std::uint64_t head = head_.load(std::memory_order_relaxed);
  if (head == tail_.load(std::memory_order_acquire)) return false;
  Launch& slot = ring_[head % kSlots];
  launch_now(slot.op, slot.function, slot.blocks, slot.threads, slot.shared_bytes, slot.params,
             slot.footprint.count > 0 ? &slot.footprint : nullptr, slot.order);
  head_.store(head + 1, std::memory_order_release);
  return true;
}

void Dispatcher::launch_now(const char* op, CUfunction function, unsigned blocks, unsigned threads,
                            unsigned shared_bytes, void* params, const LaunchFootprint* footprint,
                            LaunchOrder order) noexcept {
  if (!programmatic_) order = LaunchOrder::After;
  const LaunchOrder previous = previous_order_.exchange(order, std::memory_order_relaxed);
  const bool early = (order == LaunchOrder::Overlapping && previous != LaunchOrder::After) ||
                     (order == LaunchOrder::OverlappingWeightReader && previous == order);
  if (footprint != nullptr && footprint->known() && branches() &&
      launch_captured(op, function, blocks, threads, shared_bytes, params, *footprint)) {
    return;
  }
  void* args[] = {params};
  CUresult status = CUDA_SUCCESS;
  if (early) {
    CUlaunchAttribute attribute{};
    attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attribute.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config{};
    config.gridDimX = blocks;
    config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = threads;
    config.blockDimY = config.blockDimZ = 1;
    config.sharedMemBytes = shared_bytes;
    config.hStream = stream_;
    config.attrs = &attribute;
    config.numAttrs = 1;
    status = cuLaunchKernelEx(&config, function, args, nullptr);
  }
  // (A driver that refuses the early start gets the usual launch: the kernel runs either way.)
  if (!early || status != CUDA_SUCCESS) {
    status =
        cuLaunchKernel(function, blocks, 1, 1, threads, 1, 1, shared_bytes, stream_, args, nullptr);
  }
  if (status != CUDA_SUCCESS) refuse(op, status);
}

void Dispatcher::refuse(const char* op, CUresult status) noexcept {
  if (refused_.load(std::memory_order_relaxed)) return;
  refused_op_ = op;
  refused_status_ = status;
  refused_.store(true, std::memory_order_release);
}

void Dispatcher::end_branch_group() noexcept {
  branch_base_.clear();
  branch_nodes_.clear();
  branch_group_.clear();
}

namespace {

// Whether the stream's capture dependencies are exactly `nodes` (in any order).
bool same_nodes(const CUgraphNode* dependencies, std::size_t count,
                const std::vector<CUgraphNode>& nodes) {
  if (count != nodes.size() || count == 0) return false;
  for (std::size_t i = 0; i < count; ++i) {
    if (std::find(nodes.begin(), nodes.end(), dependencies[i]) == nodes.end()) return false;
  }
  return true;
}

}  // namespace

bool Dispatcher::launch_captured(const char* op, CUfunction function, unsigned blocks,
                                 unsigned threads, unsigned shared_bytes, void* params,
                                 const LaunchFootprint& footprint) noexcept {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t capture = 0;
  const CUgraphNode* dependencies = nullptr;
  std::size_t count = 0;
  if (cuStreamGetCaptureInfo(stream_, &status, &capture, nullptr, &dependencies, nullptr, &count) !=
          CUDA_SUCCESS ||
      status != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    return false;
  }
  if (capture != branch_capture_) {
    // A new capture: the nodes kept are an earlier graph's (whose addresses may come again).
    branch_capture_ = capture;
    end_branch_group();
  }
  // A sibling only while the stream still ends at this group's nodes (anything captured since,
  // a copy or a library call, made a node the next launch must follow) and it conflicts with
  // none of them; it then comes after what the group's first launch came after.
  bool sibling = same_nodes(dependencies, count, branch_nodes_) && branch_group_.admits(footprint);
  if (sibling &&
      cuStreamUpdateCaptureDependencies(stream_, branch_base_.data(), nullptr, branch_base_.size(),
                                        CU_STREAM_SET_CAPTURE_DEPENDENCIES) != CUDA_SUCCESS) {
    sibling = false;  // the stream still ends at the group: the launch follows all of it
  }
  if (!sibling) {
    end_branch_group();
    branch_base_.assign(dependencies, dependencies + count);
  }
  void* args[] = {params};
  const CUresult launched =
      cuLaunchKernel(function, blocks, 1, 1, threads, 1, 1, shared_bytes, stream_, args, nullptr);
  if (launched != CUDA_SUCCESS) {
    refuse(op, launched);
    end_branch_group();
    return true;
  }
  // The stream now ends at the new node alone; the group's next launch, or whatever comes
  // next, must follow every sibling: the stream is set to end at all of them.
  if (cuStreamGetCaptureInfo(stream_, &status, nullptr, nullptr, &dependencies, nullptr, &count) !=
          CUDA_SUCCESS ||
      count != 1) {
    end_branch_group();
    return true;
  }
  branch_nodes_.push_back(dependencies[0]);
  branch_group_.add(footprint);
  if (branch_nodes_.size() > 1) {
    const CUresult joined =
        cuStreamUpdateCaptureDependencies(stream_, branch_nodes_.data(), nullptr,
                                          branch_nodes_.size(), CU_STREAM_SET_CAPTURE_DEPENDENCIES);
    // Later work would otherwise follow only the newest sibling: the capture must fail.
    if (joined != CUDA_SUCCESS) refuse(op, joined);
  }
  return true;
}

void Dispatcher::run() noexcept {
  cuCtxSetCurrent(context_);
  using Clock = std::chrono::steady_clock;
  bool idle = false;  // the ring was empty at the last look, since idle_since
  Clock::time_point idle_since;
  while (true) {
    if (launch_next()) {
      idle = false;
      continue;
    }
    if (stop_.load(std::memory_order_acquire)) break;  // asked to end, and the ring is empty
    if (!idle) {
      idle = true;
      idle_since = Clock::now();
      continue;
    }
    if (Clock::now() - idle_since < kSpin) {
      cpu_relax();
      continue;
    }
    const std::uint32_t seen = wake_.load(std::memory_order_seq_cst);
    parked_.store(true, std::memory_order_seq_cst);
    if (head_.load(std::memory_order_seq_cst) == tail_.load(std::memory_order_seq_cst) &&
        !stop_.load(std::memory_order_seq_cst)) {
      wake_.wait(seen, std::memory_order_seq_cst);
    }
    parked_.store(false, std::memory_order_seq_cst);
    idle = false;
  }
  close_ring();
}

void Dispatcher::close_ring() noexcept {
  closed_.store(true, std::memory_order_seq_cst);
  // Waits out a producer that saw the ring open (enqueue checks under this lock); any later one
  // sees it closed and launches on its own thread after what is queued (launch_inline).
  { std::lock_guard lock(producers_); }
  while (launch_next()) {
  }
}

}  // namespace kiln::cuda
