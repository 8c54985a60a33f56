#include "runtime/plugin_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>

namespace kiln {
namespace {

std::string directory_of_libkiln() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&load_plugin_entry), &info) == 0 ||
      info.dli_fname == nullptr) {
    return {};
  }
  const std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

}  // namespace

void* load_plugin_entry(const char* file, const char* entry_symbol, std::string& reason) {
  std::string candidates[3];
  if (const char* dir = std::getenv("KILN_PLUGIN_DIR"); dir != nullptr && *dir != '\0') {
    candidates[0] = std::string(dir) + "/" + file;
  }
  if (const std::string here = directory_of_libkiln(); !here.empty()) candidates[1] = here + file;
  candidates[2] = file;
  // The first candidate that exists is the plugin; its load error (for the CUDA plugin typically
  // a missing libcuda.so.1: no driver installed) is the reason reported.
  void* handle = nullptr;
  for (const std::string& path : candidates) {
    if (path.empty() || (path != file && access(path.c_str(), R_OK) != 0)) continue;
    // RTLD_LOCAL: the plugin's dependencies stay out of the global namespace. RTLD_NODELETE:
    // never unloaded, not even by a dlclose elsewhere, so its code stays mapped while the
    // process ends (src/backends/cuda/shutdown.h); kiln itself never closes the handle.
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (handle != nullptr) break;
    const char* text = dlerror();
    reason = text != nullptr ? text : path;
    return nullptr;
  }
  if (handle == nullptr) {
    const char* text = dlerror();
    reason = text != nullptr ? text : std::string(file) + " not found";
    return nullptr;
  }
  void* entry = dlsym(handle, entry_symbol);
  if (entry == nullptr) reason = std::string(file) + " has no " + entry_symbol + " entry point";
  return entry;
}

}  // namespace kiln
