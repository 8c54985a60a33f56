#include "backends/cuda/context.h"

#include <algorithm>
#include <string_view>

#include "backends/cuda/check.h"
#include "backends/cuda/host_trace.h"

namespace kiln::cuda {

bool driver_ready(std::string* reason) {
  // Never destroyed: asked again by whatever runs while the process ends (shutdown.h).
  static const auto& failure = *new std::string([]() -> std::string {
    const CUresult status = cuInit(0);
    if (status == CUDA_SUCCESS) return {};
    const char* text = nullptr;
    cuGetErrorString(status, &text);
    return std::string("cuInit failed: ") + (text ? text : "unknown error");
  }());
  if (!failure.empty() && reason != nullptr) *reason = failure;
  return failure.empty();
}

Context::Context(int index) : index_(index) {
  const char* op = "Device::cuda";
  KILN_CUDA_CHECK(op, cuDeviceGet(&device_, index));
  KILN_CUDA_CHECK(op, cuDevicePrimaryCtxRetain(&context_, device_));
  KILN_CUDA_CHECK(op, cuCtxSetCurrent(context_));
  KILN_CUDA_CHECK(
      op, cuDeviceGetAttribute(&major_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_));
  KILN_CUDA_CHECK(
      op, cuDeviceGetAttribute(&minor_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_));
  KILN_CUDA_CHECK(
      op, cuDeviceGetAttribute(&sm_count_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device_));
  // Non-blocking: the legacy default stream (used by anything else in the process) never
  // serialises with kiln's work.
  KILN_CUDA_CHECK(op, cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
  void* host = nullptr;
  KILN_CUDA_CHECK(op, cuMemHostAlloc(&host, sizeof(std::uint32_t), CU_MEMHOSTALLOC_DEVICEMAP));
  error_word_host_ = static_cast<volatile std::uint32_t*>(host);
  *error_word_host_ = 0;
  KILN_CUDA_CHECK(op, cuMemHostGetDevicePointer(&error_word_device_, host, 0));
  KILN_CUDA_CHECK(op, cuMemAlloc(&split_counters_, kSplitCounters * sizeof(std::uint32_t)));
  KILN_CUDA_CHECK(op, cuMemsetD32(split_counters_, 0, kSplitCounters));
  dispatcher_ = std::make_unique<Dispatcher>(context_, stream_, index_, major_ >= 9);
}

// Runs only for a context made and destroyed while the process lives (the plugin's backends are
// never destroyed: shutdown.h). Best effort: errors at teardown have nobody to report to. The
// launcher goes first: it launches on the stream.
Context::~Context() {
  dispatcher_.reset();
  cuCtxSetCurrent(context_);
  if (stream_ != nullptr) cuStreamDestroy(stream_);
  if (error_word_host_ != nullptr) cuMemFreeHost(const_cast<std::uint32_t*>(error_word_host_));
  if (split_counters_ != 0) cuMemFree(split_counters_);
  cuDevicePrimaryCtxRelease(device_);
}

void Context::make_current() const {
  CUcontext current = nullptr;
  if (cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == context_) return;
  KILN_CUDA_CHECK("cuda", cuCtxSetCurrent(context_));
}

std::uint32_t Context::error_token(const char* op, const char* what) {
  // Compared in place ("op: what"), so a known token costs no allocation.
  const std::string_view o(op), w(what);
  auto is_text = [&](const std::string& t) {
    return t.size() == o.size() + 2 + w.size() && t.compare(0, o.size(), o) == 0 &&
           t.compare(o.size(), 2, ": ") == 0 && t.compare(o.size() + 2, w.size(), w) == 0;
  };
  std::lock_guard lock(mutex_);
  const auto it = std::find_if(tokens_.begin(), tokens_.end(), is_text);
  if (it != tokens_.end()) return static_cast<std::uint32_t>(it - tokens_.begin() + 1);
  tokens_.push_back(std::string(op) + ": " + what);
  return static_cast<std::uint32_t>(tokens_.size());
}

void Context::report_failure(const char* op, const std::string& what) {
  const std::uint32_t token = error_token(op, what.c_str());
  // A kernel's own failure, if one came first, keeps its place.
  if (*error_word_host_ == 0) *error_word_host_ = token;
}

std::string Context::in_flight() const {
  const std::uint32_t count = launch_count_.load(std::memory_order_relaxed);
  const std::uint32_t first = count > kLaunchNames ? count - kLaunchNames : 0;
  std::string names;
  for (std::uint32_t i = first; i < count; ++i) {
    const char* name = launched_[i % kLaunchNames].load(std::memory_order_relaxed);
    if (name == nullptr) continue;
    if (!names.empty()) names += ", ";
    names += name;
  }
  return names.empty() ? "none" : names;
}

void Context::forget_launches() noexcept { launch_count_.store(0, std::memory_order_relaxed); }

void Context::begin_capture(const char* op) {
  make_current();
  std::lock_guard lock(capture_mutex_);
  capture_thread_ = std::this_thread::get_id();
  KILN_CUDA_CHECK(op, cuStreamBeginCapture(stream(), CU_STREAM_CAPTURE_MODE_RELAXED));
  capturing_.store(true, std::memory_order_seq_cst);
}

void Context::wait_for_capture_end() noexcept {
  std::unique_lock lock(capture_mutex_);
  capture_ended_.wait(lock, [&] { return !capturing_.load(std::memory_order_seq_cst); });
}

CUgraph Context::end_capture(bool keep, const char* op) {
  make_current();
  CUgraph graph = nullptr;
  const CUresult status = cuStreamEndCapture(stream(), &graph);
  {
    std::lock_guard lock(capture_mutex_);
    capturing_.store(false, std::memory_order_seq_cst);
  }
  capture_ended_.notify_all();
  if (keep && status == CUDA_SUCCESS) {
    try {
      dispatcher_->throw_refused(op);  // a launch the driver refused is missing from the graph
    } catch (...) {
      cuGraphDestroy(graph);
      throw;
    }
    return graph;
  }
  if (graph != nullptr) cuGraphDestroy(graph);
  if (keep) {
    const char* text = nullptr;
    cuGetErrorString(status, &text);
    detail::fail<ExecutionError>(op, "the capture of cuda:", index_,
                                 " failed: ", text ? text : "unknown error");
  }
  return nullptr;
}

void Context::synchronize(const char* op) {
  if (capturing_here()) {
    detail::fail<InvalidArgument>(op, "cannot be captured: it waits for cuda:", index_,
                                  " (a read to the host, or a size only the device knows), which a "
                                  "CUDA graph cannot replay");
  }
  make_current();
  CUresult status;
  {
    HostTrace trace(op, "cuStreamSynchronize");
    status = cuStreamSynchronize(stream());
  }
  if (status != CUDA_SUCCESS) {
    const char* text = nullptr;
    cuGetErrorString(status, &text);
    detail::fail<ExecutionError>(op, "a kernel on cuda:", index_,
                                 " failed (ops in flight: ", in_flight(),
                                 "): ", text ? text : "unknown error");
  }
  throw_pending(op);
}

void Context::throw_pending(const char* op) {
  dispatcher_->throw_refused(op);
  const std::uint32_t token = *error_word_host_;
  if (token == 0) {
    forget_launches();
    return;
  }
  *error_word_host_ = 0;
  std::string what = "unknown failure";
  {
    std::lock_guard lock(mutex_);
    if (token <= tokens_.size()) what = tokens_[token - 1];
  }
  forget_launches();
  detail::fail<ExecutionError>(op, "an earlier op on cuda:", index_, " failed: ", what);
}

}  // namespace kiln::cuda
