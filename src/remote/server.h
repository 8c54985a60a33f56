// `kiln serve`: accepts remote clients and runs their ops on one device. Each connection is a
// session on a thread of its own, with its own values, blocks and upload cache; nothing one
// session sends can reach another's state or stop the server. A session ends when its client
// disconnects (cleanly or not) or sends a frame that fails a check (the client then gets a
// ProtocolError); its memory is freed then, and one line with its totals is logged.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kiln/device.h"
#include "remote/protocol.h"

namespace kiln::remote {

struct ServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 7878;  // 0: any free port (Server::port() tells which)
  Device device = Device::cpu();
  std::string token;  // required: an empty token is refused at start
  Limits limits;
  // How long a new connection may take to send its hello.
  std::chrono::milliseconds handshake_timeout = kHandshakeTimeout;
  // One line per session (and the server's start); null: nothing is logged.
  std::function<void(const std::string&)> log;
};

// What one session did, for its log line and the tests.
struct SessionTotals {
  std::uint64_t ops = 0;
  std::uint64_t uploads = 0;
  std::uint64_t upload_bytes = 0;
  std::uint64_t cache_hits = 0;
  std::uint64_t reads = 0;
  std::uint64_t read_bytes = 0;
  std::uint64_t blocks_run = 0;
  std::uint64_t failed_ops = 0;
};

class Server {
 public:
  // Binds host:port; BackendUnavailable when it cannot, InvalidArgument for an empty token.
  explicit Server(ServerOptions options);
  ~Server();  // stop()s
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  std::uint16_t port() const noexcept;
  // Accepts and serves clients until stop(); returns then.
  void run();
  // Starts run() on a thread of its own.
  void start();
  // Closes the listening socket and every session, and waits for their threads.
  void stop();
  // Sessions open now, and ended so far (tests).
  int open_sessions() const noexcept;
  std::uint64_t ended_sessions() const noexcept;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace kiln::remote
