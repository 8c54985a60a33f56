#include "runtime/remote_plugin.h"

#include "runtime/plugin_loader.h"

namespace kiln {
namespace {

using PluginState = LoadedPlugin<RemotePluginApi>;

PluginState load() {
#ifndef KILN_HAVE_REMOTE_PLUGIN
  PluginState state;
  state.not_compiled = true;
  state.reason = "kiln was built without the remote backend (a static build, or KILN_REMOTE=OFF)";
  return state;
#else
  return load_plugin<RemotePluginApi>("libkiln_remote.so", "kiln_remote_plugin_api",
                                      "cannot load the remote backend plugin");
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
