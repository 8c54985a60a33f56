// A fake CUDA driver, built as libcuda.so.1, for testing how kiln's CUDA plugin uses the driver
// on machines without a GPU: put its directory first in LD_LIBRARY_PATH and the plugin loads it
// instead of the real one. It implements the driver calls the plugin imports, on host memory:
// allocations are host allocations (a device pointer is a host address), copies and memsets are
// done, streams and events complete at once, modules are accepted when they are cubins (ELF), and
// kernels do not run: a launch checks its context, function, stream and grid, is counted, and
// costs KILN_FAKE_CUDA_LAUNCH_US microseconds of its thread's time (default 0).
//
// What it is for is the order in which a process ends (src/backends/cuda/shutdown.h). It tears
// itself down like a driver does, in an atexit handler registered in cuInit; and like a tool that
// intercepts the driver (compute-sanitizer), it keeps launch state created at the first launch,
// whose destructor is registered then, after whatever the plugin registered at its start. A driver
// call after either teardown, a launch still in progress while one runs, or a call from a child
// forked after cuInit (where CUDA is not usable) is what a real driver may answer with a SIGSEGV
// or a hang: here it prints a line starting "[fake cuda]" to stderr and aborts.
// KILN_FAKE_CUDA_REPORT=FILE: the driver's teardown writes "launches N" (every launch handed to
// it) there, so a test can check that no queued launch was lost.
#include <cuda.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fake_driver/fake_cuda_control.h"

struct CUctx_st {
  int device;
};
struct CUstream_st {
  std::uint32_t magic;
};
struct CUevent_st {
  std::uint32_t magic;
};
struct CUmod_st {
  std::uint32_t magic;
  std::vector<CUfunc_st*> functions;
};
struct CUfunc_st {
  std::uint32_t magic;
  CUmod_st* module;
  std::string name;
};

namespace {

constexpr std::uint32_t kLive = 0x6b696c6e;  // "kiln"
constexpr std::uint32_t kDead = 0xdeadbeef;
constexpr int kDevices = 1;
constexpr std::size_t kDeviceMemory = std::size_t(16) << 30;

enum Phase { kUninitialised, kRunning, kTornDown };
std::atomic<int> g_phase{kUninitialised};
std::atomic<int> g_in_launch{0};  // threads inside cuLaunchKernel now
std::atomic<bool> g_interceptor_gone{false};
std::atomic<std::int64_t> g_launches{0};
std::atomic<int> g_launch_microseconds{0};
pid_t g_init_pid = 0;

CUctx_st g_contexts[kDevices] = {{0}};
int g_retains[kDevices] = {0};
thread_local CUcontext t_current = nullptr;
thread_local bool t_programmatic = false;  // inside cuLaunchKernelEx, with the attribute set
thread_local std::vector<CUcontext> t_stack;

std::mutex g_mutex;  // guards the blocks and the contexts' retain counts
std::map<std::uintptr_t, std::size_t> g_device_blocks;  // start (a host address) -> bytes
std::set<void*> g_host_blocks;                          // pinned host allocations

std::atomic<bool> g_recording{false};
std::mutex g_log_mutex;
std::vector<kiln::fake_cuda::LaunchRecord> g_log;

// The simulated stream capture (fake_cuda_control.h), under g_capture_mutex: one stream at a time.
std::atomic<bool> g_simulate_captures{false};
std::mutex g_capture_mutex;
CUstream g_capturing = nullptr;  // the stream being captured, if any
cuuint64_t g_capture_id = 0;
std::vector<kiln::fake_cuda::CapturedNode> g_nodes;
std::vector<CUgraphNode> g_frontier;  // what the next captured launch comes after

CUgraphNode node_handle(std::size_t position) {
  return reinterpret_cast<CUgraphNode>(position + 1);
}

[[noreturn]] void die(const char* call, const char* what) {
  std::fprintf(stderr, "[fake cuda] %s: %s (pid %d)\n", call, what, static_cast<int>(getpid()));
  std::fflush(stderr);
  std::abort();
}

// Every entry point but cuInit, cuGetErrorString and the version queries starts here.
CUresult enter(const char* call) {
  const int phase = g_phase.load(std::memory_order_seq_cst);
  if (phase == kTornDown) die(call, "called after the driver's teardown");
  if (phase != kRunning) return CUDA_ERROR_NOT_INITIALIZED;
  // CUDA is not usable in a child forked after cuInit.
  if (getpid() != g_init_pid) die(call, "called in a child forked after cuInit");
  return CUDA_SUCCESS;
}

void driver_teardown() {
  if (const char* path = std::getenv("KILN_FAKE_CUDA_REPORT");
      path != nullptr && *path != '\0' && getpid() == g_init_pid) {
    if (std::FILE* file = std::fopen(path, "w")) {
      std::fprintf(file, "launches %lld\n", static_cast<long long>(g_launches.load()));
      std::fclose(file);
    }
  }
  g_phase.store(kTornDown, std::memory_order_seq_cst);
  if (g_in_launch.load(std::memory_order_seq_cst) > 0) {
    die("exit", "the driver was torn down while a launch was in progress");
  }
}

// The state a driver-intercepting tool creates at the first launch; destroyed at exit in the
// order of its registration.
struct LaunchInterceptor {
  LaunchInterceptor() = default;
  LaunchInterceptor(const LaunchInterceptor&) = delete;
  LaunchInterceptor& operator=(const LaunchInterceptor&) = delete;
  ~LaunchInterceptor() {
    g_interceptor_gone.store(true, std::memory_order_seq_cst);
    if (g_in_launch.load(std::memory_order_seq_cst) > 0) {
      die("exit", "the launch interceptor was torn down while a launch was in progress");
    }
  }
};

// fork copies only the calling thread: none of the child's threads is inside a launch.
void forget_launches_in_child() { g_in_launch.store(0); }

// Whether [pointer, pointer + bytes) lies inside one device allocation.
bool inside_device_block(CUdeviceptr pointer, std::size_t bytes) {
  std::lock_guard lock(g_mutex);
  auto it = g_device_blocks.upper_bound(pointer);
  if (it == g_device_blocks.begin()) return false;
  --it;  // the last block starting at or below pointer
  const std::uintptr_t offset = pointer - it->first;
  return offset <= it->second && bytes <= it->second - offset;
}

bool live_stream(CUstream stream) {
  return stream == nullptr || stream->magic == kLive;  // nullptr: the legacy default stream
}

// Streams and events: a live handle carries kLive until destroyed.
template <class Handle>
CUresult create_handle(Handle** handle) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *handle = new Handle{kLive};
  return CUDA_SUCCESS;
}

template <class Handle>
CUresult destroy_handle(Handle* handle) {
  if (handle == nullptr || handle->magic != kLive) return CUDA_ERROR_INVALID_HANDLE;
  handle->magic = kDead;
  delete handle;
  return CUDA_SUCCESS;
}

// cuMemsetD8Async, cuMemsetD32Async and cuMemsetD32 (the null stream): count words of value.
template <class Word>
CUresult fill(const char* call, CUdeviceptr device, Word value, std::size_t count,
              CUstream stream) {
  if (const CUresult status = enter(call)) return status;
  if (!live_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (count == 0) return CUDA_SUCCESS;
  if (device % sizeof(Word) != 0 || count > SIZE_MAX / sizeof(Word) ||
      !inside_device_block(device, count * sizeof(Word))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::fill_n(reinterpret_cast<Word*>(device), count, value);
  return CUDA_SUCCESS;
}

void* aligned_block(std::size_t alignment, std::size_t bytes) {
  const std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  return std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded);
}

}  // namespace

namespace kiln::fake_cuda {

std::int64_t launch_count() { return g_launches.load(); }

void set_launch_microseconds(int microseconds) { g_launch_microseconds.store(microseconds); }

void record_launches() {
  std::lock_guard lock(g_log_mutex);
  g_log.clear();
  g_recording.store(true, std::memory_order_release);
}

std::vector<LaunchRecord> launch_log() {
  std::lock_guard lock(g_log_mutex);
  return g_log;
}

void simulate_captures(bool on) { g_simulate_captures.store(on); }

std::vector<CapturedNode> captured_nodes() {
  std::lock_guard lock(g_capture_mutex);
  return g_nodes;
}

}  // namespace kiln::fake_cuda

extern "C" {

CUresult CUDAAPI cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  static const bool started = [] {
    g_init_pid = getpid();
    if (const char* us = std::getenv("KILN_FAKE_CUDA_LAUNCH_US")) {
      g_launch_microseconds.store(std::atoi(us));
    }
    pthread_atfork(nullptr, nullptr, forget_launches_in_child);
    g_phase.store(kRunning);
    return std::atexit(driver_teardown) == 0;
  }();
  return started ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char** text) {
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS:
      *text = "no error";
      break;
    case CUDA_ERROR_INVALID_VALUE:
      *text = "invalid argument";
      break;
    case CUDA_ERROR_OUT_OF_MEMORY:
      *text = "out of memory";
      break;
    case CUDA_ERROR_NOT_INITIALIZED:
      *text = "initialization error";
      break;
    case CUDA_ERROR_INVALID_IMAGE:
      *text = "device kernel image is invalid";
      break;
    case CUDA_ERROR_INVALID_CONTEXT:
      *text = "invalid device context";
      break;
    case CUDA_ERROR_INVALID_HANDLE:
      *text = "invalid resource handle";
      break;
    case CUDA_ERROR_NOT_FOUND:
      *text = "named symbol not found";
      break;
    case CUDA_ERROR_INVALID_DEVICE:
      *text = "invalid device ordinal";
      break;
    default:
      *text = "unknown error (fake driver)";
      break;
  }
  return CUDA_SUCCESS;
}

// NVRTC looks this up in whatever libcuda.so.1 is loaded, for the driver's private tables; a fake
// has none (and NVRTC then compiles as it does without a driver).
CUresult CUDAAPI cuGetExportTable(const void** table, const CUuuid*) {
  if (table != nullptr) *table = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = CUDA_VERSION;  // what a driver of the toolkit the plugin was built with says
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
  if (const CUresult status = enter("cuDeviceGetCount")) return status;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = kDevices;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  if (const CUresult status = enter("cuDeviceGet")) return status;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= kDevices) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char* name, int length, CUdevice device) {
  if (const CUresult status = enter("cuDeviceGetName")) return status;
  if (device < 0 || device >= kDevices) return CUDA_ERROR_INVALID_DEVICE;
  if (name == nullptr || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<std::size_t>(length), "kiln fake GPU %d", device);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice device) {
  if (const CUresult status = enter("cuDeviceGetUuid")) return status;
  if (device < 0 || device >= kDevices) return CUDA_ERROR_INVALID_DEVICE;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::memset(uuid->bytes, 0, sizeof uuid->bytes);
  uuid->bytes[0] = static_cast<char>(device + 1);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(std::size_t* bytes, CUdevice device) {
  if (const CUresult status = enter("cuDeviceTotalMem")) return status;
  if (device < 0 || device >= kDevices) return CUDA_ERROR_INVALID_DEVICE;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *bytes = kDeviceMemory;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  if (const CUresult status = enter("cuDeviceGetAttribute")) return status;
  if (device < 0 || device >= kDevices) return CUDA_ERROR_INVALID_DEVICE;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {  // a small Hopper part
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *value = 9;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *value = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *value = 4;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *value = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      *value = 48 << 10;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  if (const CUresult status = enter("cuDevicePrimaryCtxRetain")) return status;
  if (device < 0 || device >= kDevices) return CUDA_ERROR_INVALID_DEVICE;
  if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_mutex);
  ++g_retains[device];
  *context = &g_contexts[device];
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice device) {
  if (const CUresult status = enter("cuDevicePrimaryCtxRelease")) return status;
  if (device < 0 || device >= kDevices) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(g_mutex);
  if (g_retains[device] == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --g_retains[device];
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext context) {
  if (const CUresult status = enter("cuCtxSetCurrent")) return status;
  t_current = context;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* context) {
  if (const CUresult status = enter("cuCtxGetCurrent")) return status;
  if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *context = t_current;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext context) {
  if (const CUresult status = enter("cuCtxPushCurrent")) return status;
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  t_stack.push_back(t_current);
  t_current = context;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext* context) {
  if (const CUresult status = enter("cuCtxPopCurrent")) return status;
  if (t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (context != nullptr) *context = t_current;
  t_current = t_stack.empty() ? nullptr : t_stack.back();
  if (!t_stack.empty()) t_stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream* stream, unsigned int) {
  if (const CUresult status = enter("cuStreamCreate")) return status;
  if (t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return create_handle(stream);
}

CUresult CUDAAPI cuStreamDestroy(CUstream stream) {
  if (const CUresult status = enter("cuStreamDestroy")) return status;
  return destroy_handle(stream);
}

CUresult CUDAAPI cuStreamSynchronize(CUstream stream) {
  if (const CUresult status = enter("cuStreamSynchronize")) return status;
  return live_stream(stream) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int) {
  if (const CUresult status = enter("cuStreamWaitEvent")) return status;
  if (!live_stream(stream) || event == nullptr || event->magic != kLive) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return CUDA_SUCCESS;
}

// Graphs: the fake records no work, so it captures nothing; it refuses, as a driver without
// graph support would, and the backend reports that at capture.
// (Simulated where a test asks: fake_cuda_control.h.)
CUresult CUDAAPI cuStreamBeginCapture(CUstream stream, CUstreamCaptureMode) {
  if (const CUresult status = enter("cuStreamBeginCapture")) return status;
  if (!live_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (!g_simulate_captures.load()) return CUDA_ERROR_NOT_SUPPORTED;
  std::lock_guard lock(g_capture_mutex);
  if (g_capturing != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  g_capturing = stream;
  ++g_capture_id;
  g_nodes.clear();
  g_frontier.clear();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  if (const CUresult status = enter("cuStreamEndCapture")) return status;
  if (graph != nullptr) *graph = nullptr;
  std::lock_guard lock(g_capture_mutex);
  if (g_capturing == nullptr || g_capturing != stream) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  g_capturing = nullptr;
  return CUDA_SUCCESS;
}

// Captures exist only where a test simulates them (fake_cuda_control.h).
CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream stream, CUstreamCaptureStatus* status,
                                        cuuint64_t* id, CUgraph*, const CUgraphNode** dependencies,
                                        const CUgraphEdgeData**, size_t* count) {
  if (const CUresult entered = enter("cuStreamGetCaptureInfo")) return entered;
  if (!live_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lock(g_capture_mutex);
  const bool active = g_capturing == stream;
  if (status != nullptr) {
    *status = active ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  }
  if (id != nullptr) *id = active ? g_capture_id : 0;
  if (dependencies != nullptr) *dependencies = active ? g_frontier.data() : nullptr;
  if (count != nullptr) *count = active ? g_frontier.size() : 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamUpdateCaptureDependencies(CUstream stream, CUgraphNode* dependencies,
                                                   const CUgraphEdgeData* data, size_t count,
                                                   unsigned int flags) {
  if (const CUresult status = enter("cuStreamUpdateCaptureDependencies")) return status;
  std::lock_guard lock(g_capture_mutex);
  if (g_capturing == nullptr || g_capturing != stream) return CUDA_ERROR_ILLEGAL_STATE;
  if (data != nullptr || flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES) {
    return CUDA_ERROR_NOT_SUPPORTED;  // the only form kiln uses
  }
  for (size_t i = 0; i < count; ++i) {
    const auto position = reinterpret_cast<std::uintptr_t>(dependencies[i]);
    if (position == 0 || position > g_nodes.size()) return CUDA_ERROR_INVALID_VALUE;
  }
  g_frontier.assign(dependencies, dependencies + count);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec*, CUgraph, unsigned long long) {
  if (const CUresult status = enter("cuGraphInstantiateWithFlags")) return status;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuGraphGetNodes(CUgraph, CUgraphNode*, size_t* count) {
  if (const CUresult status = enter("cuGraphGetNodes")) return status;
  if (count != nullptr) *count = 0;
  return CUDA_ERROR_INVALID_HANDLE;  // no graph is ever made here
}

CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode, CUgraphNodeType*) {
  if (const CUresult status = enter("cuGraphNodeGetType")) return status;
  return CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuGraphKernelNodeGetParams(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*) {
  if (const CUresult status = enter("cuGraphKernelNodeGetParams")) return status;
  return CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuFuncGetName(const char**, CUfunction) {
  if (const CUresult status = enter("cuFuncGetName")) return status;
  return CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec, CUstream) {
  if (const CUresult status = enter("cuGraphLaunch")) return status;
  return CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec) {
  if (const CUresult status = enter("cuGraphExecDestroy")) return status;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph) {
  if (const CUresult status = enter("cuGraphDestroy")) return status;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventCreate(CUevent* event, unsigned int) {
  if (const CUresult status = enter("cuEventCreate")) return status;
  return create_handle(event);
}

CUresult CUDAAPI cuEventDestroy(CUevent event) {
  if (const CUresult status = enter("cuEventDestroy")) return status;
  return destroy_handle(event);
}

CUresult CUDAAPI cuEventRecord(CUevent event, CUstream stream) {
  if (const CUresult status = enter("cuEventRecord")) return status;
  if (event == nullptr || event->magic != kLive || !live_stream(stream)) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventQuery(CUevent event) {
  if (const CUresult status = enter("cuEventQuery")) return status;
  return event != nullptr && event->magic == kLive ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuEventSynchronize(CUevent event) {
  if (const CUresult status = enter("cuEventSynchronize")) return status;
  return event != nullptr && event->magic == kLive ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr* pointer, std::size_t bytes) {
  if (const CUresult status = enter("cuMemAlloc")) return status;
  if (pointer == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (bytes > kDeviceMemory) return CUDA_ERROR_OUT_OF_MEMORY;
  void* block = aligned_block(256, bytes);
  if (block == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard lock(g_mutex);
  g_device_blocks.emplace(reinterpret_cast<std::uintptr_t>(block), bytes);
  *pointer = reinterpret_cast<CUdeviceptr>(block);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr pointer) {
  if (const CUresult status = enter("cuMemFree")) return status;
  std::lock_guard lock(g_mutex);
  if (g_device_blocks.erase(pointer) == 0) return CUDA_ERROR_INVALID_VALUE;
  std::free(reinterpret_cast<void*>(pointer));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostAlloc(void** pointer, std::size_t bytes, unsigned int) {
  if (const CUresult status = enter("cuMemHostAlloc")) return status;
  if (pointer == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  void* block = aligned_block(4096, bytes);
  if (block == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard lock(g_mutex);
  g_host_blocks.insert(block);
  *pointer = block;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFreeHost(void* pointer) {
  if (const CUresult status = enter("cuMemFreeHost")) return status;
  std::lock_guard lock(g_mutex);
  if (g_host_blocks.erase(pointer) == 0) return CUDA_ERROR_INVALID_VALUE;
  std::free(pointer);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr* device, void* host, unsigned int flags) {
  if (const CUresult status = enter("cuMemHostGetDevicePointer")) return status;
  if (device == nullptr || host == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  *device = reinterpret_cast<CUdeviceptr>(host);  // one address space
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoHAsync(void* host, CUdeviceptr device, std::size_t bytes,
                                   CUstream stream) {
  if (const CUresult status = enter("cuMemcpyDtoHAsync")) return status;
  if (!live_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (bytes == 0) return CUDA_SUCCESS;
  if (host == nullptr || !inside_device_block(device, bytes)) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(host, reinterpret_cast<const void*>(device), bytes);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr device, const void* host, std::size_t bytes,
                                   CUstream stream) {
  if (const CUresult status = enter("cuMemcpyHtoDAsync")) return status;
  if (!live_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (bytes == 0) return CUDA_SUCCESS;
  if (host == nullptr || !inside_device_block(device, bytes)) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(reinterpret_cast<void*>(device), host, bytes);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr destination, CUcontext, CUdeviceptr source,
                                   CUcontext, std::size_t bytes, CUstream stream) {
  if (const CUresult status = enter("cuMemcpyPeerAsync")) return status;
  if (!live_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (bytes == 0) return CUDA_SUCCESS;
  if (!inside_device_block(destination, bytes) || !inside_device_block(source, bytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::memmove(reinterpret_cast<void*>(destination), reinterpret_cast<const void*>(source), bytes);
  return CUDA_SUCCESS;
}

// The plugin's context clears its split counters with it once (cuda.h names it cuMemsetD32_v2).
CUresult CUDAAPI cuMemsetD32(CUdeviceptr device, unsigned int value, std::size_t count) {
  return fill<std::uint32_t>("cuMemsetD32", device, value, count, nullptr);
}

CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr device, unsigned int value, std::size_t count,
                                  CUstream stream) {
  return fill<std::uint32_t>("cuMemsetD32Async", device, value, count, stream);
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr device, unsigned char value, std::size_t count,
                                 CUstream stream) {
  return fill<std::uint8_t>("cuMemsetD8Async", device, value, count, stream);
}

CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  if (const CUresult status = enter("cuModuleLoadData")) return status;
  if (t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (std::memcmp(image,
                  "\x7f"
                  "ELF",
                  4) != 0)
    return CUDA_ERROR_INVALID_IMAGE;
  *module = new CUmod_st{kLive, {}};
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  if (const CUresult status = enter("cuModuleGetFunction")) return status;
  if (function == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (module == nullptr || module->magic != kLive) return CUDA_ERROR_INVALID_HANDLE;
  auto* made = new CUfunc_st{kLive, module, name};
  module->functions.push_back(made);
  *function = made;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction function, CUfunction_attribute, int) {
  if (const CUresult status = enter("cuFuncSetAttribute")) return status;
  if (function == nullptr || function->magic != kLive) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction function,
                                                             int threads, size_t) {
  if (const CUresult status = enter("cuOccupancyMaxActiveBlocksPerMultiprocessor")) return status;
  if (blocks == nullptr || threads <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (function == nullptr || function->magic != kLive) return CUDA_ERROR_INVALID_HANDLE;
  *blocks = 2048 / threads;  // the threads of an SM bound it; its registers and memory not modelled
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleUnload(CUmodule module) {
  if (const CUresult status = enter("cuModuleUnload")) return status;
  if (module == nullptr || module->magic != kLive) return CUDA_ERROR_INVALID_HANDLE;
  for (CUfunc_st* function : module->functions) function->magic = kDead;  // kept: stale handles
  module->magic = kDead;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction function, unsigned int grid_x, unsigned int grid_y,
                                unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                                unsigned int block_z, unsigned int, CUstream stream,
                                void** parameters, void** extra) {
  if (const CUresult status = enter("cuLaunchKernel")) return status;
  static const LaunchInterceptor interceptor;  // its destructor is registered now
  (void)interceptor;
  g_in_launch.fetch_add(1, std::memory_order_seq_cst);
  struct Leave {
    ~Leave() { g_in_launch.fetch_sub(1, std::memory_order_seq_cst); }
  } leave;
  if (g_interceptor_gone.load(std::memory_order_seq_cst)) {
    die("cuLaunchKernel", "called after the launch interceptor's teardown");
  }
  if (t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (function == nullptr || function->magic != kLive || !live_stream(stream)) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (grid_x * grid_y * grid_z == 0 || block_x * block_y * block_z == 0 ||
      block_x * block_y * block_z > 1024 || (parameters == nullptr && extra == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (const int us = g_launch_microseconds.load(std::memory_order_relaxed); us > 0) {
    // A spin, not a sleep: the real driver's cost is host work, and a sleep of a few
    // microseconds overshoots by tens.
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
    while (std::chrono::steady_clock::now() < until) {
    }
  }
  if (g_recording.load(std::memory_order_acquire)) {
    std::uint64_t first = 0;
    if (parameters != nullptr) std::memcpy(&first, parameters[0], sizeof first);
    std::lock_guard lock(g_log_mutex);
    g_log.push_back({first, std::this_thread::get_id(), t_programmatic});
  }
  if (g_simulate_captures.load()) {
    std::lock_guard lock(g_capture_mutex);
    if (g_capturing == stream) {
      kiln::fake_cuda::CapturedNode node;
      if (parameters != nullptr)
        std::memcpy(&node.first_word, parameters[0], sizeof(std::uint64_t));
      for (CUgraphNode after : g_frontier) {
        node.after.push_back(reinterpret_cast<std::uintptr_t>(after) - 1);
      }
      g_nodes.push_back(std::move(node));
      g_frontier.assign(1, node_handle(g_nodes.size() - 1));
      return CUDA_SUCCESS;  // captured, not run
    }
  }
  g_launches.fetch_add(1, std::memory_order_seq_cst);
  return CUDA_SUCCESS;
}

// A launch with attributes (kiln sets only programmatic stream serialisation, which changes when
// a kernel may start, never what it does): the plain launch of the same grid, recorded as
// programmatic where that attribute is on.
CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction function,
                                  void** parameters, void** extra) {
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  bool programmatic = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& attribute = config->attrs[i];
    if (attribute.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) {
      programmatic = attribute.value.programmaticStreamSerializationAllowed != 0;
    } else {
      return CUDA_ERROR_NOT_SUPPORTED;  // kiln asks for no other attribute
    }
  }
  t_programmatic = programmatic;
  const CUresult status =
      cuLaunchKernel(function, config->gridDimX, config->gridDimY, config->gridDimZ,
                     config->blockDimX, config->blockDimY, config->blockDimZ,
                     config->sharedMemBytes, config->hStream, parameters, extra);
  t_programmatic = false;
  return status;
}

}  // extern "C"
