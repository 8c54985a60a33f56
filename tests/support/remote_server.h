// A `kiln serve` server inside the test process, on a free loopback port, started on first use
// and kept for the life of the process: tests and the conformance table (KILN_TEST_DEVICES=remote)
// reach it as Device::remote(test::remote_url(), test::kRemoteToken). It runs ops on the CPU, or
// on the device KILN_TEST_REMOTE_DEVICE names (cuda:0 in scripts/gpu-check gpu-remote).
#pragma once

#include <kiln/kiln.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "remote/server.h"

namespace kiln::test {

inline constexpr const char* kRemoteToken = "kiln-test-token";

// The shared server (on a thread of its own; never stopped: the process ends with it).
inline remote::Server& remote_server() {
  static remote::Server* server = [] {
    remote::ServerOptions options;
    options.port = 0;
    if (const char* device = std::getenv("KILN_TEST_REMOTE_DEVICE"); device && *device)
      options.device = Device::parse(device).without_fusion();
    options.token = kRemoteToken;
    auto* s = new remote::Server(std::move(options));
    s->start();
    return s;
  }();
  return *server;
}

inline std::string remote_url() {
  return "remote://127.0.0.1:" + std::to_string(remote_server().port());
}

// A device on the shared server (a session of its own per token; one shared session here).
inline Device remote_device() { return Device::remote(remote_url(), kRemoteToken); }

}  // namespace kiln::test
