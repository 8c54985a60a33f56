// Frames of the remote protocol built by hand, for tests that speak to a server directly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "contract/contract.h"
#include "remote/protocol.h"

namespace kiln::test {

inline std::vector<std::byte> hello_frame(const std::string& token,
                                          std::uint32_t version = remote::kProtocolVersion,
                                          std::uint64_t contract = kBackendContractHash,
                                          std::uint32_t magic = remote::kProtocolMagic) {
  return remote::encode_frame(remote::FrameKind::Hello, [&](ir::wire::Writer& out) {
    remote::write_hello(out, remote::Hello{magic, version, contract, token});
  });
}

inline std::vector<std::byte> commands_frame(const std::vector<remote::Command>& commands) {
  return remote::encode_frame(remote::FrameKind::Commands, [&](ir::wire::Writer& out) {
    out.count(commands.size());
    for (const remote::Command& c : commands) remote::write_command(out, c);
  });
}

}  // namespace kiln::test
