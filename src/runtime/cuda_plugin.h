// The interface between libkiln and the CUDA backend plugin (libkiln_cuda.so). The plugin
// exports one C symbol, kiln_cuda_plugin_api, returning this table; kiln checks its contract
// fingerprint (contract.h) before using anything else in it. Both sides are built from the
// same headers, so the table may use C++ types.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "contract/backend.h"
#include "contract/contract.h"
#include "kiln/process_group.h"

namespace kiln {

struct GpuInfo {
  std::string name;
  std::int64_t total_memory = 0;  // bytes
  int major = 0;                  // compute capability
  int minor = 0;
};

// NVRTC work done for one device (counted since the process started).
struct KernelCacheStats {
  std::int64_t compiles = 0;     // NVRTC compilations (neither cache had the kernel)
  std::int64_t memory_hits = 0;  // found loaded in this process
  std::int64_t disk_hits = 0;    // loaded from the disk cache
  double compile_seconds = 0;    // NVRTC time, all compiles
  double disk_load_seconds = 0;  // time to read and load cached cubins
};

struct CudaPluginApi {
  // kBackendContractHash of the plugin's build: first, so that any plugin can be checked.
  std::uint64_t contract = 0;
  // Usable GPUs, or -1 with a reason when the driver cannot start (no GPU: 0 and a reason).
  int (*device_count)(std::string* reason) = nullptr;
  GpuInfo (*device_info)(int index) = nullptr;
  // The backend of GPU index (made once; callers cache it).
  std::shared_ptr<Backend> (*make_backend)(int index) = nullptr;
  KernelCacheStats (*kernel_cache_stats)(int index) = nullptr;
  // Forgets the kernels loaded in this process (the disk cache stays): tests of the disk cache.
  void (*clear_kernel_memory_cache)(int index) = nullptr;
  // NCCL as this process loads it for the collectives of cuda tensors (loading it on the first
  // call): "NCCL 2.28.9 (/usr/lib/.../libnccl.so.2)" with *loaded true, or why the collectives
  // go through the host instead.
  std::string (*nccl_status)(bool* loaded) = nullptr;
  // How group's collectives of tensors on GPU index move: "nccl", or empty for the group's own
  // communicator (NCCL is not loaded, or the group chose the host path for that GPU).
  std::string (*collective_transport)(distributed::Communicator& group, int index) = nullptr;
  // cuDNN as GPU index's convolutions use it (loading it and making the GPU's handle on the first
  // call): "cuDNN 9.19.0 (/usr/.../libcudnn.so.9)" with *loaded true, or why that GPU's
  // convolutions run kiln's own kernels only. *calls (when not null): the convolution ops that
  // GPU has run through cuDNN in this process (tests see which path an op took).
  std::string (*cudnn_status)(int index, bool* loaded, std::int64_t* calls) = nullptr;
};

// The plugin's table, loading the plugin on the first call; nullptr with the reason when kiln
// was built without it (*not_compiled = true) or it cannot be loaded.
const CudaPluginApi* cuda_plugin(std::string* reason, bool* not_compiled = nullptr);

// GPUs usable here (asked of the plugin once); 0 with the reason when none.
int cuda_device_count(std::string* reason, bool* not_compiled = nullptr);

}  // namespace kiln

extern "C" {
// Exported by libkiln_cuda.so.
using KilnCudaPluginEntry = const kiln::CudaPluginApi* (*)();
}
