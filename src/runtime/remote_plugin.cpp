#include "runtime/remote_plugin.h"

#include "runtime/plugin_loader.h"

namespace kiln {
namespace {

struct PluginState {
  const RemotePluginApi* api = nullptr;
  std::string reason;
  bool not_compiled = false;
};

PluginState load() {
  PluginState state;
#ifndef KILN_HAVE_REMOTE_PLUGIN
  state.not_compiled = true;
  state.reason = "kiln was built without the remote backend (a static build, or KILN_REMOTE=OFF)";
  return state;
#else
  std::string error;
  auto entry = reinterpret_cast<KilnRemotePluginEntry>(
      load_plugin_entry("libkiln_remote.so", "kiln_remote_plugin_api", error));
  if (entry == nullptr) {
    state.reason = "cannot load the remote backend plugin: " + error;
    return state;
  }
  const RemotePluginApi* api = entry();
  if (api == nullptr || api->contract != kBackendContractHash) {
    state.reason = "libkiln_remote.so was built for another backend contract (fingerprint " +
                   contract_name(api != nullptr ? api->contract : 0) + ", this kiln has " +
                   contract_name(kBackendContractHash) + "): rebuild it with this kiln";
    return state;
  }
  state.api = api;
  return state;
#endif
}

}  // namespace

const RemotePluginApi* remote_plugin(std::string* reason, bool* not_compiled) {
  // Never destroyed, like the backends.
  static const PluginState& state = *new PluginState(load());
  if (state.api == nullptr) {
    if (reason != nullptr) *reason = state.reason;
    if (not_compiled != nullptr) *not_compiled = state.not_compiled;
  }
  return state.api;
}

}  // namespace kiln
