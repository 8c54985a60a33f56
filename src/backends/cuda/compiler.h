// Run-time compilation of generated kernels with NVRTC, for the device's exact architecture
// (--gpu-architecture=sm_XX, cubin). Three levels: kernels already loaded in this process (by a
// short key the caller builds, so the source is generated only on a miss), the disk cache
// (by a hash of source, architecture, NVRTC and driver versions), and NVRTC itself.
#pragma once

#include <cuda.h>

#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cuda_plugin.h"

namespace kiln::cuda {

class Context;

class Compiler {
 public:
  explicit Compiler(Context& context);
  ~Compiler();
  Compiler(const Compiler&) = delete;
  Compiler& operator=(const Compiler&) = delete;

  // The function `name` of the module whose source make_source() returns; key names that source
  // uniquely (e.g. "binary:add:f32").
  CUfunction function(const std::string& key, const char* name,
                      const std::function<std::string()>& make_source);
  KernelCacheStats stats() const;
  // Unloads nothing in use; forgets the loaded kernels so the next request goes to disk.
  void clear_memory_cache();

 private:
  CUmodule load_module(const std::string& source, const std::string& key);
  std::vector<char> compile(const std::string& source, const std::string& key);

  Context& context_;
  std::string version_tag_;  // arch + NVRTC + driver versions, part of the disk key
  mutable std::mutex mutex_;
  std::unordered_map<std::string, CUfunction> functions_;
  std::vector<CUmodule> modules_;  // kept loaded: functions handed out may still be in use
  KernelCacheStats stats_;
};

}  // namespace kiln::cuda
