// One end of a remote connection: whole frames sent and received over a TCP socket (Asio).
// Sends are serialised by a lock, so several threads may send; one thread receives.
#pragma once

#include <asio.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "remote/protocol.h"

namespace kiln::remote {

// An allocator whose resize leaves new elements default-initialised (bytes as they were) instead
// of zeroed: a frame's body is grown and at once overwritten by the socket's bytes, and zeroing
// it first was a pass over memory per frame (64 MB for a 64 MB upload, on every one).
template <class T>
struct UninitializedAllocator : std::allocator<T> {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() noexcept = default;
  template <class U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}  // NOLINT: rebinding
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) {
      ::new (static_cast<void*>(p)) U;
    } else {
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
  }
};

// A received frame's body.
using FrameBody = std::vector<std::byte, UninitializedAllocator<std::byte>>;

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
  FrameHeader receive(FrameBody& body, std::uint64_t limit, Deadline deadline = Deadline::max());
  // Ends the connection in both directions (a thread blocked in receive returns with an error).
  void shutdown() noexcept;
  std::string peer() const;

 private:
  void read_exact(std::span<std::byte> data, Deadline deadline);

  asio::ip::tcp::socket socket_;
  std::mutex send_mutex_;
};

}  // namespace kiln::remote
