// One client's state on the server: the values it asked the server to hold (by the client's
// ids), the failures kept in place of values whose op failed, its blocks and its upload cache.
// Everything a frame asks for is checked here before a backend sees it: ids (held, in range),
// each op against ops.def's signature and remote::infer_types (the tensor layer's checks), the
// types the client expects, the session's byte and tensor limits. A check that an honest client
// cannot fail (an id that holds nothing, types that disagree) ends the session: SessionEnded.
// A check that it can (an op the device cannot run, memory) is kept as a failure in the op's
// results and reported when they are read.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "contract/backend.h"
#include "remote/connection.h"
#include "remote/protocol.h"
#include "remote/server.h"

namespace kiln::remote {

class Session {
 public:
  Session(Backend& backend, const Limits& limits, Connection& connection);
  ~Session();

  // Runs one frame the client sent after the handshake. ProtocolError for a malformed one.
  void handle(FrameKind kind, std::span<const std::byte> body);
  const SessionTotals& totals() const noexcept { return totals_; }

 private:
  struct Failure {
    ErrorCode code;
    std::string message;
  };
  struct Slot {
    std::shared_ptr<const Failure> failure;  // set when the op that made it failed
    ir::TensorType type;                     // what the client was told
    std::uint64_t bytes = 0;                 // counted against the session's limit
    bool bound = false;
    bool shares_cache = false;  // may share storage with an upload in the cache
  };
  // An upload whose chunks are still arriving: written straight into the tensor where the
  // backend lends its host bytes (Backend::host_bytes: the CPU), else into data, which goes
  // through from_data when complete (device memory, QFloat blocks).
  struct PendingUpload {
    ir::TensorType type;
    Primitive tensor;
    TensorData data;
    std::span<std::byte> target;  // tensor's bytes or data's
    std::uint64_t hash = 0;
    std::uint64_t received = 0;
  };
  // The ids a block's local ids stand for (null: ids are the session's own).
  using Bindings = std::span<const std::uint32_t>;

  void run(const Command& command, Bindings bindings);
  void run_op(const ir::Op& op, Bindings bindings);
  void upload(const Upload& chunk);
  void read(std::uint64_t request, std::uint32_t id);
  void describe(std::uint64_t request, std::uint32_t id);
  void assign(std::uint32_t dst, std::uint32_t src);
  void free(std::uint32_t id);
  // Gives a slot that shares a cached upload storage of its own (a copy), before a view of it is
  // taken or it is written. Throws OutOfMemory past the session's limit.
  void materialize(std::uint32_t id);
  void from_cache(std::uint32_t id, std::uint64_t hash);
  // Binds id to the failure being handled (call inside a catch block), remembered by hash.
  void fail_upload(std::uint32_t id, std::uint64_t hash, const ir::TensorType& type);

  // The session id a command's id stands for, checked against the bindings and the limits.
  std::uint32_t resolve(std::uint32_t id, Bindings bindings) const;
  Slot& held(std::uint32_t id, const char* what);
  // A free slot for id (ProtocolError when it holds a value or is past the limit).
  Slot& fresh(std::uint32_t id, const char* what);
  void bind(std::uint32_t id, Primitive value, const ir::TensorType& type, bool shares_cache);
  void bind_failure(std::uint32_t id, const ir::TensorType& type,
                    std::shared_ptr<const Failure> failure);
  // The failure of the exception being handled.
  static std::shared_ptr<const Failure> current_failure();
  void reply(std::uint64_t request, ErrorCode status, std::span<const std::byte> body = {});
  void reply_failure(std::uint64_t request, const Failure& failure);
  void reserve_bytes(std::uint64_t bytes, const char* op);

  Backend& backend_;
  const Limits limits_;
  Connection& connection_;
  const Device device_;
  std::vector<Slot> slots_;
  std::vector<Primitive> values_;  // the value of each slot (null: failed or unbound)
  std::uint64_t bytes_ = 0;
  std::unordered_map<std::uint32_t, PendingUpload> uploads_;
  std::unordered_map<std::uint64_t, std::pair<Primitive, ir::TensorType>> cache_;
  // Uploads that failed (memory), by content hash, with their types and failures.
  std::unordered_map<std::uint64_t, std::pair<ir::TensorType, std::shared_ptr<const Failure>>>
      failed_uploads_;
  std::vector<std::vector<Command>> blocks_;
  std::vector<ir::ReadResult> reads_;  // replay's (no read op is replayed)
  SessionTotals totals_;
};

// Thrown by Session for a frame an honest client cannot send; the session ends.
class SessionEnded : public ProtocolError {
 public:
  using ProtocolError::ProtocolError;
};

}  // namespace kiln::remote
