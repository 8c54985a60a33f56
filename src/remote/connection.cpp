#include "remote/connection.h"

#include <poll.h>

#include <cerrno>

namespace kiln::remote {

Connection::Connection(asio::ip::tcp::socket socket) : socket_(std::move(socket)) {
  // Commands are batched by the client already; small frames (a read request) must not wait
  // for Nagle's timer.
  socket_.set_option(asio::ip::tcp::no_delay(true));
}

void Connection::send(std::span<const asio::const_buffer> buffers) {
  std::lock_guard lock(send_mutex_);
  asio::write(socket_, buffers);
}

void Connection::read_exact(std::span<std::byte> data, Deadline deadline) {
  if (deadline == Deadline::max()) {
    asio::read(socket_, asio::buffer(data.data(), data.size()));
    return;
  }
  std::size_t done = 0;
  while (done < data.size()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) throw asio::system_error(asio::error::timed_out);
    pollfd ready{socket_.native_handle(), POLLIN, 0};
    const int polled = ::poll(&ready, 1, static_cast<int>(left.count()));
    if (polled < 0 && errno == EINTR) continue;
    if (polled < 0) throw asio::system_error(asio::error_code(errno, asio::system_category()));
    if (polled == 0) throw asio::system_error(asio::error::timed_out);
    // Readable: read_some returns what has arrived (or the end of the stream) without waiting.
    done += socket_.read_some(asio::buffer(data.data() + done, data.size() - done));
  }
}

FrameHeader Connection::receive(FrameBody& body, std::uint64_t limit, Deadline deadline) {
  std::array<std::byte, kFrameHeaderBytes> head;
  read_exact(head, deadline);
  const FrameHeader header = read_frame_header(head, limit);
  // Grown as the bytes arrive: a peer that announces a long frame and sends nothing holds a
  // chunk, not the whole length.
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  body.clear();
  while (body.size() < header.length) {
    const std::size_t have = body.size();
    body.resize(std::min<std::size_t>(header.length, have + kChunk));
    read_exact(std::span(body).subspan(have), deadline);
  }
  return header;
}

void Connection::shutdown() noexcept {
  asio::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
}

std::string Connection::peer() const {
  asio::error_code error;
  const auto endpoint = socket_.remote_endpoint(error);
  if (error) return "(unknown peer)";
  return endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
}

}  // namespace kiln::remote
