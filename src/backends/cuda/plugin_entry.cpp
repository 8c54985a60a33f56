// The plugin's one exported symbol: the table kiln checks (api_version) and calls.
#include <map>
#include <mutex>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cudnn_loader.h"
#include "backends/cuda/nccl_transport.h"
#include "kiln/version.h"
#include "runtime/cuda_plugin.h"

namespace kiln::cuda {
namespace {

int device_count(std::string* reason) {
  if (!driver_ready(reason)) return -1;
  int count = 0;
  const CUresult status = cuDeviceGetCount(&count);
  if (status != CUDA_SUCCESS || count == 0) {
    if (reason != nullptr) *reason = "the CUDA driver reports no GPU";
    return 0;
  }
  return count;
}

GpuInfo device_info(int index) {
  GpuInfo info;
  CUdevice device = 0;
  KILN_CUDA_CHECK("kiln info", cuDeviceGet(&device, index));
  char name[256] = {};
  KILN_CUDA_CHECK("kiln info", cuDeviceGetName(name, sizeof name, device));
  info.name = name;
  std::size_t bytes = 0;
  KILN_CUDA_CHECK("kiln info", cuDeviceTotalMem(&bytes, device));
  info.total_memory = static_cast<std::int64_t>(bytes);
  KILN_CUDA_CHECK(
      "kiln info",
      cuDeviceGetAttribute(&info.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device));
  KILN_CUDA_CHECK(
      "kiln info",
      cuDeviceGetAttribute(&info.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device));
  return info;
}

std::mutex& backends_mutex() {
  static std::mutex m;
  return m;
}
// Never destroyed (see registry.cpp): backends outlive every tensor, also at exit, and no
// destructor of a context, allocator or module cache races the driver's teardown. Their launcher
// threads are stopped at exit in the order shutdown.h gives.
std::map<int, std::shared_ptr<CudaBackend>>& backends() {
  static auto& table = *new std::map<int, std::shared_ptr<CudaBackend>>();
  return table;
}

std::shared_ptr<CudaBackend> backend(int index) {
  std::lock_guard lock(backends_mutex());
  auto& slot = backends()[index];
  if (!slot) slot = std::make_shared<CudaBackend>(index);
  return slot;
}

std::shared_ptr<Backend> make_backend(int index) { return backend(index); }
KernelCacheStats kernel_cache_stats(int index) {
  return backend(index)->runtime().compiler.stats();
}
void clear_kernel_memory_cache(int index) {
  backend(index)->runtime().compiler.clear_memory_cache();
}

std::string nccl_status_of(bool* loaded) {
#ifdef KILN_HAVE_NCCL
  return nccl_status(loaded);
#else
  *loaded = false;
  return "the CUDA plugin was built without NCCL's header (nccl.h): collectives of cuda tensors "
         "go through the host";
#endif
}

std::string collective_transport(distributed::Communicator& group, int index) {
#ifdef KILN_HAVE_NCCL
  return nccl_transport_name(group, index);
#else
  (void)group, (void)index;
  return {};
#endif
}

std::string cudnn_status(int index, bool* loaded, std::int64_t* calls) {
  return cudnn::status(backend(index)->runtime(), loaded, calls);
}

const CudaPluginApi kApi{kBackendContractHash, device_count,         device_info,
                         make_backend,         kernel_cache_stats,   clear_kernel_memory_cache,
                         nccl_status_of,       collective_transport, cudnn_status};

}  // namespace
}  // namespace kiln::cuda

extern "C" __attribute__((visibility("default"))) const kiln::CudaPluginApi*
kiln_cuda_plugin_api() {
  return &kiln::cuda::kApi;
}
