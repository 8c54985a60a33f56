// Loads libkiln_cuda.so on first use (runtime/plugin_loader.h). Nothing here runs unless a
// CUDA device is asked for, so a CPU-only program maps no CUDA library.
#include "runtime/cuda_plugin.h"

#include <mutex>

#include "kiln/version.h"
#include "runtime/plugin_loader.h"

namespace kiln {
namespace {

using PluginState = LoadedPlugin<CudaPluginApi>;

PluginState load() {
#ifndef KILN_HAVE_CUDA_PLUGIN
  PluginState state;
  state.not_compiled = true;
  state.reason = "kiln was built without the CUDA backend (KILN_CUDA=OFF or no CUDA toolkit)";
  return state;
#else
  return load_plugin<CudaPluginApi>("libkiln_cuda.so", "kiln_cuda_plugin_api",
                                    "cannot load the CUDA backend plugin (no CUDA driver?)");
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
