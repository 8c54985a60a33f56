// One end of a remote connection: whole frames sent and received over a TCP socket (Asio).
// Sends are serialised by a lock, so several threads may send; one thread receives.
#pragma once

#include <asio.hpp>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "remote/protocol.h"

namespace kiln::remote {

class Connection {
 public:
  explicit Connection(asio::ip::tcp::socket socket);

  // Writes buffers (whole frames, in order) as one unit; asio::system_error when the peer is
  // gone.
  void send(std::span<const asio::const_buffer> buffers);
  void send(std::span<const std::byte> frames) {
    const asio::const_buffer buffer(frames.data(), frames.size());
    send(std::span<const asio::const_buffer>(&buffer, 1));
  }
  using Deadline = std::chrono::steady_clock::time_point;
  // Reads one frame into body (resized to its length); a frame longer than limit is a
  // ProtocolError before its body is read. asio::system_error when the peer is gone, or (with a
  // deadline: the handshakes) timed_out when the whole frame has not arrived by then.
  FrameHeader receive(std::vector<std::byte>& body, std::uint64_t limit,
                      Deadline deadline = Deadline::max());
  // Ends the connection in both directions (a thread blocked in receive returns with an error).
  void shutdown() noexcept;
  std::string peer() const;

 private:
  void read_exact(std::span<std::byte> data, Deadline deadline);

  asio::ip::tcp::socket socket_;
  std::mutex send_mutex_;
};

}  // namespace kiln::remote
