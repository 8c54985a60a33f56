// The entry point libkiln looks up when a remote device is first used (runtime/remote_plugin.h).
#include "contract/contract.h"
#include "remote/remote_backend.h"
#include "runtime/remote_plugin.h"

namespace {

std::shared_ptr<kiln::Backend> make_backend(kiln::Device device, const std::string& address,
                                            const std::string& token) {
  return std::make_shared<kiln::remote::RemoteBackend>(device, address, token);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const kiln::RemotePluginApi*
kiln_remote_plugin_api() {
  static const kiln::RemotePluginApi api{kiln::kBackendContractHash, &make_backend};
  return &api;
}
