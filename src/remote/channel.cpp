#include "remote/channel.h"

#include <xxhash.h>

#include "contract/contract.h"
#include "remote/content_hash.h"

namespace kiln::remote {
namespace {

// A batch goes out once its commands take about this many bytes: big enough that a step of a
// small model is one frame, small enough that the server starts on a long stream early.
constexpr std::size_t kBatchBytes = std::size_t{1} << 20;
// Uploads smaller than this are not cached: sending them again costs less than holding them.
constexpr std::uint64_t kMinCachedBytes = std::uint64_t{1} << 20;

std::pair<std::string, std::string> split_address(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    detail::fail<InvalidArgument>("Device::remote", "the address \"", address,
                                  "\" is not HOST:PORT");
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return {host, address.substr(colon + 1)};
}

std::exception_ptr unavailable(const std::string& address, const std::string& what) {
  return std::make_exception_ptr(
      BackendUnavailable("[remote] the server at " + address + " is not reachable: " + what));
}

}  // namespace

Channel::Channel(const std::string& address, const std::string& token) : address_(address) {
  const auto [host, port] = split_address(address);
  asio::ip::tcp::socket socket(io_);
  try {
    asio::ip::tcp::resolver resolver(io_);
    asio::connect(socket, resolver.resolve(host, port));
  } catch (const asio::system_error& e) {
    std::rethrow_exception(unavailable(address, e.what()));
  }
  connection_ = std::make_unique<Connection>(std::move(socket));
  FrameBody body;
  try {
    connection_->send(encode_frame(FrameKind::Hello, [&](ir::wire::Writer& out) {
      write_hello(out, Hello{kProtocolMagic, kProtocolVersion, kBackendContractHash, token});
    }));
    FrameHeader header;
    std::pair<ErrorCode, std::string> refusal;
    try {
      header = connection_->receive(body, kMaxHelloBytes * 16,
                                    std::chrono::steady_clock::now() + kHandshakeTimeout);
      if (header.kind == FrameKind::Refused) refusal = read_refused(body);
      if (header.kind == FrameKind::Welcome) welcome_ = read_welcome(body);
    } catch (const ProtocolError& e) {
      // An answer that is no kiln frame at all (another service on that port) names the address
      // like every other failure to connect.
      throw ProtocolError(std::string(e.what()) + " (server " + address + ")");
    }
    if (header.kind == FrameKind::Refused) {
      throw_error(refusal.first, refusal.second + " (server " + address + ")");
    }
    if (header.kind != FrameKind::Welcome) {
      throw ProtocolError("[remote] the server at " + address +
                          " answered the hello with frame kind " +
                          std::to_string(static_cast<int>(header.kind)));
    }
  } catch (const asio::system_error& e) {
    std::rethrow_exception(unavailable(address, e.what()));
  }
  std::thread([this, exit = reader_exit_] {
    read_replies();
    std::lock_guard lock(exit->mutex);
    exit->ended = true;
    exit->done.notify_all();
  }).detach();
}

Channel::~Channel() {
  if (connection_) connection_->shutdown();
  std::unique_lock lock(reader_exit_->mutex);
  reader_exit_->done.wait(lock, [&] { return reader_exit_->ended; });
}

void Channel::rethrow_locked() { std::rethrow_exception(broken_); }

std::uint32_t Channel::new_id() {
  std::lock_guard lock(mutex_);
  if (broken_) rethrow_locked();
  if (!free_ids_.empty()) {
    const std::uint32_t id = free_ids_.back();
    free_ids_.pop_back();
    return id;
  }
  if (next_id_ >= welcome_.limits.max_tensors) {
    detail::fail<OutOfMemory>("remote", "the server at ", address_, " holds at most ",
                              welcome_.limits.max_tensors, " tensors per session");
  }
  return next_id_++;
}

void Channel::release(std::uint32_t id) noexcept {
  std::lock_guard lock(mutex_);
  if (broken_) return;
  Command c;
  c.kind = CommandKind::Free;
  c.id = id;
  try {
    batch_.push_back(std::move(c));
    batch_bytes_ += 5;
    // Reused only after the Free is queued: a command naming the new value comes after it.
    free_ids_.push_back(id);
  } catch (...) {
    // Out of memory while freeing: the id is lost, which costs one slot on the server.
  }
}

void Channel::return_unused(std::uint32_t id) noexcept {
  std::lock_guard lock(mutex_);
  try {
    free_ids_.push_back(id);
  } catch (...) {
    // Out of memory: the id is lost, which costs one slot on the server.
  }
}

void Channel::enqueue(Command command) {
  std::lock_guard lock(mutex_);
  if (broken_) rethrow_locked();
  batch_bytes_ += 16 + command.op.inputs.size() * 4 + command.op.attributes.size() * 16 +
                  command.op.outputs.size() * 24;
  batch_.push_back(std::move(command));
  if (batch_bytes_ >= kBatchBytes) send_batch_locked();
}

void Channel::request(Command command, ReplyHandler on_reply) {
  std::lock_guard lock(mutex_);
  if (broken_) rethrow_locked();
  command.value = next_request_++;
  waiting_.emplace(command.value, std::move(on_reply));
  batch_.push_back(std::move(command));
  send_batch_locked();
}

void Channel::flush() {
  std::lock_guard lock(mutex_);
  if (broken_) rethrow_locked();
  send_batch_locked();
}

void Channel::send_batch_locked() {
  if (batch_.empty()) return;
  blocks_.compress(batch_, welcome_.limits);
  const std::vector<std::byte> frame =
      encode_frame(FrameKind::Commands, [&](ir::wire::Writer& out) {
        out.count(batch_.size());
        for (const Command& c : batch_) write_command(out, c);
      });
  batch_.clear();
  batch_bytes_ = 0;
  if (frame.size() - kFrameHeaderBytes > welcome_.limits.max_frame_bytes) {
    fail_locked(std::make_exception_ptr(ProtocolError(kiln::detail::concat(
        "[remote] a batch of ", frame.size(), " bytes is larger than the server at ", address_,
        " accepts (", welcome_.limits.max_frame_bytes, ")"))));
    rethrow_locked();
  }
  try {
    connection_->send(frame);
  } catch (const asio::system_error& e) {
    fail_locked(unavailable(address_, std::string("the connection was lost: ") + e.what()));
    rethrow_locked();
  }
}

std::uint64_t Channel::hash_of(const TensorData& data) const {
  // The type is part of the key: equal bytes as another dtype, scheme or shape are another tensor.
  std::vector<std::int64_t> type(data.shape().dims().begin(), data.shape().dims().end());
  type.push_back(static_cast<std::int64_t>(data.dtype()));
  if (data.dtype() == DType::QFloat) {
    type.push_back(static_cast<std::int64_t>(data.scheme().kind));
    type.push_back(data.scheme().block_size);
  }
  const std::uint64_t type_hash = XXH3_64bits(type.data(), type.size() * sizeof(std::int64_t));
  const std::uint64_t hash = content_hash(data.bytes(), type_hash);
  return hash == 0 ? 1 : hash;  // 0 means "not cached" on the wire
}

void Channel::upload(std::uint32_t id, const TensorData& data) {
  const std::uint64_t size = data.bytes().size();
  const std::uint64_t hash = size >= kMinCachedBytes ? hash_of(data) : 0;
  std::lock_guard lock(mutex_);
  if (broken_) rethrow_locked();
  if (hash != 0) {
    if (const auto found = cached_index_.find(hash); found != cached_index_.end()) {
      cached_.splice(cached_.begin(), cached_, found->second);
      Command c;
      c.kind = CommandKind::FromCache;
      c.id = id;
      c.value = hash;
      batch_.push_back(std::move(c));
      ++cache_hits_;
      return;
    }
  }
  // Commands queued before this upload run before it.
  send_batch_locked();
  try {
    const std::uint64_t chunk_limit = welcome_.limits.max_frame_bytes - 4096;
    std::uint64_t offset = 0;
    do {
      const std::uint64_t n = std::min(chunk_limit, size - offset);
      ir::wire::Writer head;
      const std::size_t start = begin_frame(head, FrameKind::Upload);
      head.u32(id);
      head.u64(hash);
      ir::wire::write_data_head(head, data);
      head.u64(offset);
      head.u64(n);
      head.patch_u32(start,
                     static_cast<std::uint32_t>(head.size() - start - kFrameHeaderBytes + n));
      const std::vector<std::byte> header = std::move(head).take();
      const asio::const_buffer buffers[] = {asio::buffer(header),
                                            asio::buffer(data.bytes().data() + offset, n)};
      connection_->send(buffers);
      offset += n;
    } while (offset < size);
  } catch (const asio::system_error& e) {
    fail_locked(unavailable(address_, std::string("the connection was lost: ") + e.what()));
    rethrow_locked();
  }
  if (hash == 0) return;
  cached_.emplace_front(hash, size);
  cached_index_[hash] = cached_.begin();
  cached_bytes_ += size;
  // The server counts the cache against the session's memory: a quarter of it at most.
  const std::uint64_t budget = welcome_.limits.max_session_bytes / 4;
  while (cached_bytes_ > budget && cached_.size() > 1) {
    const auto [old_hash, old_size] = cached_.back();
    Command c;
    c.kind = CommandKind::Evict;
    c.value = old_hash;
    batch_.push_back(std::move(c));
    cached_index_.erase(old_hash);
    cached_.pop_back();
    cached_bytes_ -= old_size;
  }
}

void Channel::fail_locked(std::exception_ptr error) {
  if (broken_) return;
  broken_ = std::move(error);
  for (auto& [request, handler] : waiting_) handler(ErrorCode::Error, {}, broken_);
  waiting_.clear();
  connection_->shutdown();
}

void Channel::read_replies() {
  FrameBody body;
  for (;;) {
    FrameHeader header;
    try {
      header =
          connection_->receive(body, welcome_.limits.max_frame_bytes + (std::uint64_t{1} << 32));
    } catch (const asio::system_error& e) {
      std::lock_guard lock(mutex_);
      fail_locked(unavailable(address_, std::string("the connection was lost: ") + e.what()));
      return;
    } catch (const ProtocolError& e) {
      std::lock_guard lock(mutex_);
      fail_locked(std::current_exception());
      return;
    }
    try {
      if (header.kind == FrameKind::Refused) {
        const auto [code, message] = read_refused(body);
        try {
          throw_error(code, message + " (server " + address_ + ")");
        } catch (...) {
          std::lock_guard lock(mutex_);
          fail_locked(std::current_exception());
        }
        return;
      }
      if (header.kind != FrameKind::Reply) {
        throw ProtocolError("[remote] the server sent frame kind " +
                            std::to_string(static_cast<int>(header.kind)));
      }
      const Reply reply = read_reply(body);
      ReplyHandler handler;
      {
        std::lock_guard lock(mutex_);
        const auto found = waiting_.find(reply.request);
        if (found == waiting_.end()) {
          throw ProtocolError(kiln::detail::concat("[remote] a reply to request ", reply.request,
                                                   ", which nothing waits for"));
        }
        handler = std::move(found->second);
        waiting_.erase(found);
      }
      handler(reply.status, reply.body, nullptr);
    } catch (const ProtocolError&) {
      std::lock_guard lock(mutex_);
      fail_locked(std::current_exception());
      return;
    }
  }
}

}  // namespace kiln::remote
