// The client's end of a connection to `kiln serve`: the handshake, a batch of commands that
// grows as ops are called and goes out when a read needs it (or when it is large), uploads,
// and a reader thread that hands each reply to the request waiting for it. Ops never wait for
// the server; reads do. Shared by one RemoteBackend and every tensor it made; never destroyed
// (like the backends).
#pragma once

#include <asio.hpp>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "remote/block_cache.h"
#include "remote/connection.h"
#include "remote/protocol.h"

namespace kiln::remote {

class Channel {
 public:
  // Connects to address ("host:port") and shakes hands: BackendUnavailable naming the address
  // when nothing answers there, AuthenticationFailed for a refused token, ProtocolError for a
  // version or op-contract mismatch.
  Channel(const std::string& address, const std::string& token);
  ~Channel();

  const Welcome& welcome() const noexcept { return welcome_; }
  const std::string& address() const noexcept { return address_; }

  // A value id for a new result (reused after release).
  std::uint32_t new_id();
  // Queues Free of id (the tensor showing it is gone); nothing once the connection is lost.
  void release(std::uint32_t id) noexcept;
  // Takes back an id from new_id that no command has named (no Free is sent for it).
  void return_unused(std::uint32_t id) noexcept;
  // Queues command (the ids it names are the session's); sends the batch when it is large.
  void enqueue(Command command);
  // Queues a request (Read, Describe, Sync, Stats) whose reply on_reply handles on the reader
  // thread, and sends the batch. on_reply gets the reply's status and body, or (lost not null)
  // the error that ended the connection first.
  using ReplyHandler = std::function<void(ErrorCode status, std::span<const std::byte> body,
                                          std::exception_ptr lost)>;
  void request(Command command, ReplyHandler on_reply);
  // Sends the queued batch.
  void flush();
  // Binds id to data on the server: sent once per content (later uploads of equal bytes,
  // dtype and shape are bound from the server's cache).
  void upload(std::uint32_t id, const TensorData& data);
  // Uploads whose content the server had already (tests, benchmarks).
  std::uint64_t cache_hits() const noexcept { return cache_hits_.load(); }
  // Batches sent as a block the server had already (tests, benchmarks).
  std::uint64_t blocks_replayed() const noexcept { return blocks_.replayed(); }

 private:
  void send_batch_locked();
  void fail_locked(std::exception_ptr error);
  [[noreturn]] void rethrow_locked();
  void read_replies();
  std::uint64_t hash_of(const TensorData& data) const;

  std::string address_;
  asio::io_context io_;
  std::unique_ptr<Connection> connection_;
  Welcome welcome_;
  // The reader thread is detached (a channel lives as long as the process, like its backend, and
  // a reader that ends with its connection leaves nothing to join); a destructor waits for this.
  struct ReaderExit {
    std::mutex mutex;
    std::condition_variable done;
    bool ended = false;
  };
  std::shared_ptr<ReaderExit> reader_exit_ = std::make_shared<ReaderExit>();

  std::mutex mutex_;
  std::vector<Command> batch_;   // queued, not sent
  std::size_t batch_bytes_ = 0;  // an estimate of the batch's encoded size
  std::vector<std::uint32_t> free_ids_;
  std::uint32_t next_id_ = 0;
  std::uint64_t next_request_ = 1;
  std::unordered_map<std::uint64_t, ReplyHandler> waiting_;
  std::exception_ptr broken_;  // why the connection ended; null while it is open
  BlockCache blocks_;

  // Uploads the server caches, most recently used first, with their sizes.
  std::list<std::pair<std::uint64_t, std::uint64_t>> cached_;
  std::unordered_map<std::uint64_t, std::list<std::pair<std::uint64_t, std::uint64_t>>::iterator>
      cached_index_;
  std::uint64_t cached_bytes_ = 0;
  std::atomic<std::uint64_t> cache_hits_{0};
};

}  // namespace kiln::remote
