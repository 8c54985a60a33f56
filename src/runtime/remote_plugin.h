// The interface between libkiln and the remote backend (libkiln_remote.so: the client of
// `remote://` devices and the `kiln serve` server). Loaded on the first remote device, so a
// program that uses none maps no networking code. The plugin exports one C symbol,
// kiln_remote_plugin_api, returning this table; its contract fingerprint is checked first.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "contract/backend.h"
#include "contract/contract.h"

namespace kiln {

struct RemotePluginApi {
  std::uint64_t contract = 0;
  // Connects to address ("host:port") with token and returns the backend of device;
  // BackendUnavailable, AuthenticationFailed or ProtocolError when the handshake fails.
  std::shared_ptr<Backend> (*make_backend)(Device device, const std::string& address,
                                           const std::string& token) = nullptr;
};

// The plugin's table, loading it on the first call; nullptr with the reason when kiln was built
// without it (*not_compiled = true) or it cannot be loaded.
const RemotePluginApi* remote_plugin(std::string* reason, bool* not_compiled = nullptr);

}  // namespace kiln

extern "C" {
using KilnRemotePluginEntry = const kiln::RemotePluginApi* (*)();
}
