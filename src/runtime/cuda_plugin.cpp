// Loads libkiln_cuda.so on first use. It is looked for in KILN_PLUGIN_DIR when set, else next
// to libkiln.so (found with dladdr on one of kiln's own symbols), then by the loader's search
// path. Nothing here runs unless a CUDA device is asked for, so a CPU-only program maps no
// CUDA library.
#include "runtime/cuda_plugin.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

#include "kiln/version.h"

namespace kiln {
namespace {

struct PluginState {
  const CudaPluginApi* api = nullptr;
  std::string reason;
  bool not_compiled = false;
};

std::string directory_of_libkiln() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&cuda_plugin), &info) == 0 ||
      info.dli_fname == nullptr) {
    return {};
  }
  const std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

PluginState load() {
  PluginState state;
#ifndef KILN_HAVE_CUDA_PLUGIN
  state.not_compiled = true;
  state.reason = "kiln was built without the CUDA backend (KILN_CUDA=OFF or no CUDA toolkit)";
  return state;
#else
  constexpr const char* kFile = "libkiln_cuda.so";
  std::string candidates[3];
  if (const char* dir = std::getenv("KILN_PLUGIN_DIR"); dir != nullptr && *dir != '\0') {
    candidates[0] = std::string(dir) + "/" + kFile;
  }
  if (const std::string here = directory_of_libkiln(); !here.empty()) candidates[1] = here + kFile;
  candidates[2] = kFile;
  // The first candidate that exists is the plugin; its load error (typically a missing
  // libcuda.so.1: no driver installed) is the reason reported.
  void* handle = nullptr;
  std::string error;
  for (const std::string& path : candidates) {
    if (path.empty() || (path != kFile && access(path.c_str(), R_OK) != 0)) continue;
    // RTLD_LOCAL: the plugin's CUDA symbols stay out of the global namespace. RTLD_NODELETE:
    // never unloaded, not even by a dlclose elsewhere, so its code stays mapped while the
    // process ends (src/backends/cuda/shutdown.h); kiln itself never closes the handle.
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (handle != nullptr) break;
    const char* text = dlerror();
    error = text != nullptr ? text : path;
    break;
  }
  if (handle == nullptr) {
    state.reason = "cannot load the CUDA backend plugin (no CUDA driver?): " + error;
    return state;
  }
  auto entry = reinterpret_cast<KilnCudaPluginEntry>(dlsym(handle, "kiln_cuda_plugin_api"));
  if (entry == nullptr) {
    state.reason = "libkiln_cuda.so has no kiln_cuda_plugin_api entry point";
    return state;
  }
  const CudaPluginApi* api = entry();
  if (api == nullptr || api->contract != kBackendContractHash) {
    state.reason = "libkiln_cuda.so was built for another backend contract (fingerprint " +
                   contract_name(api != nullptr ? api->contract : 0) + ", this kiln has " +
                   contract_name(kBackendContractHash) + "): rebuild it with this kiln";
    return state;
  }
  state.api = api;  // the handle stays open for the life of the process
  return state;
#endif
}

}  // namespace

const CudaPluginApi* cuda_plugin(std::string* reason, bool* not_compiled) {
  // Never destroyed, like the backends: static destructors may still ask for a device.
  static const PluginState& state = *new PluginState(load());
  if (state.api == nullptr) {
    if (reason != nullptr) *reason = state.reason;
    if (not_compiled != nullptr) *not_compiled = state.not_compiled;
  }
  return state.api;
}

int cuda_device_count(std::string* reason, bool* not_compiled) {
  struct Count {
    int count = 0;
    std::string reason;
    bool not_compiled = false;
  };
  static const Count& cached = *new Count([] {
    Count c;
    const CudaPluginApi* api = cuda_plugin(&c.reason, &c.not_compiled);
    if (api == nullptr) return c;
    c.count = api->device_count(&c.reason);
    if (c.count < 0) c.count = 0;
    return c;
  }());
  if (cached.count == 0) {
    if (reason != nullptr) *reason = cached.reason;
    if (not_compiled != nullptr) *not_compiled = cached.not_compiled;
  }
  return cached.count;
}

}  // namespace kiln
