// Loading a plugin library of kiln's (libkiln_cuda.so, libkiln_remote.so) on first use. It is
// looked for in KILN_PLUGIN_DIR when set, else next to libkiln.so (found with dladdr on one of
// kiln's own symbols), then by the loader's search path.
#pragma once

#include <cstdint>
#include <string>

#include "contract/contract.h"

namespace kiln {

// The address of entry_symbol in plugin file, or null with the reason (the file's load error,
// or a missing entry point). The library stays loaded for the life of the process.
void* load_plugin_entry(const char* file, const char* entry_symbol, std::string& reason);

// A plugin's table (Api: a struct whose first member is its contract fingerprint), or null with
// the reason it cannot be used.
template <class Api>
struct LoadedPlugin {
  const Api* api = nullptr;
  std::string reason;
  bool not_compiled = false;
};

// Loads file, calls its entry symbol (const Api* ()) and checks that the table was built for
// libkiln's op contract. unloadable starts the reason when the file cannot be loaded.
template <class Api>
LoadedPlugin<Api> load_plugin(const char* file, const char* entry_symbol,
                              const std::string& unloadable) {
  LoadedPlugin<Api> state;
  std::string error;
  auto entry = reinterpret_cast<const Api* (*)()>(load_plugin_entry(file, entry_symbol, error));
  if (entry == nullptr) {
    state.reason = unloadable + ": " + error;
    return state;
  }
  const Api* api = entry();
  if (api == nullptr || api->contract != kBackendContractHash) {
    state.reason = std::string(file) + " was built for another backend contract (fingerprint " +
                   contract_name(api != nullptr ? api->contract : 0) + ", this kiln has " +
                   contract_name(kBackendContractHash) + "): rebuild it with this kiln";
    return state;
  }
  state.api = api;  // the library stays loaded for the life of the process
  return state;
}

}  // namespace kiln
