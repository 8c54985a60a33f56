// The remote protocol between a client (RemoteBackend, client.h) and `kiln serve` (server.h).
//
// A connection carries frames: u32 body length, u8 FrameKind, body. The first frame a client
// sends is Hello; it is the only frame the server reads before the token is checked, and it is
// refused above kMaxHelloBytes. Every later frame is at most Limits::max_frame_bytes. All fields
// little-endian (ir/wire.h); every count, id, size and offset is checked before use, and a frame
// that fails a check ends its session with a ProtocolError on the client.
//
//   client -> server
//     Hello     u32 kProtocolMagic, u32 version, u64 ops.def contract hash, text token
//     Commands  u32 n, n x (u8 CommandKind, fields): a batch, run in order (below)
//     Upload    u32 id, u64 content hash, u8 dtype, [QFloat: its scheme], shape, u64 offset, u64 n,
//               n bytes: a chunk of a tensor's bytes (a QFloat tensor's blocks); the tensor is
//               bound to id once its last chunk arrives
//   server -> client
//     Welcome   text backend name, 3 x u8 default dtypes (float, int, bool), kDTypeCount x u8
//               DTypeUsageSet bits, u64 max frame bytes, u64 max session bytes, u32 max tensors
//     Refused   u8 ErrorCode, text message (the handshake failed; the server closes)
//     Reply     u64 request, u8 ErrorCode (Ok or the error), then by request kind: TensorData
//               (Read), TensorType (Describe), MemoryStats (Stats), nothing (Sync) or text (an
//               error's message)
//
// Commands. Value ids are the client's: it numbers the values it asks the server to hold and
// reuses an id after freeing it. Ops never wait: the client learns every result's type from
// remote::infer_types, and a failure on the server is kept in its results' slots (with its type
// and message) and reported when one of them, or a value made from them, is read.
//   Op          an ir::Op (ir/wire.h) over value ids
//   Free        u32 id
//   Assign      u32 dst, u32 src           Backend::assign
//   Read        u64 request, u32 id        -> Reply with the value's TensorData
//   Describe    u64 request, u32 id        -> Reply with its type (results of value-shaped ops)
//   Sync        u64 request                -> Reply once the device's queued work is done
//   Stats       u64 request                -> Reply with the device's MemoryStats
//   Seed        u64 seed
//   Cleanup                                Backend::memory_cleanup
//   ResetPeak                              Backend::reset_peak_memory
//   FromCache   u32 id, u64 hash           binds id to a copy-free alias of a cached upload
//   Evict       u64 hash                   drops an upload from the cache
//   Block       u32 block, u32 n, n x command, then as Bind: defines a block (a repeated batch
//               of commands over local ids) and runs it once
//   Bind        u32 block, u32 n, n x u32 id: runs a block again, its local ids bound to ids
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "ir/op_ir.h"
#include "ir/wire.h"

namespace kiln::remote {

inline constexpr std::uint32_t kProtocolMagic = 0x4e4c494b;  // "KILN" little-endian
// 2: QFloat tensors (their scheme in uploads, replies and types).
inline constexpr std::uint32_t kProtocolVersion = 2;
inline constexpr std::uint32_t kMaxHelloBytes = 4096;
// How long either side waits for the other's handshake frame: a peer that connects and says
// nothing (or is not a kiln peer) does not hold a thread for ever.
inline constexpr std::chrono::seconds kHandshakeTimeout{10};
inline constexpr std::size_t kFrameHeaderBytes = 5;
inline constexpr std::size_t kDTypeCount = static_cast<std::size_t>(DType::QFloat) + 1;

enum class FrameKind : std::uint8_t { Hello, Commands, Upload, Welcome, Refused, Reply };
inline constexpr FrameKind kLastFrameKind = FrameKind::Reply;

// What a server allows one session; told to the client in Welcome.
struct Limits {
  std::uint64_t max_frame_bytes = std::uint64_t{80} << 20;
  std::uint64_t max_session_bytes = std::uint64_t{16} << 30;
  std::uint32_t max_tensors = 1u << 20;
  std::uint32_t max_blocks = 4096;
  std::uint32_t max_block_commands = 1u << 16;
};

// A kiln::Error's type on the wire; Ok for success.
enum class ErrorCode : std::uint8_t {
  Ok,
  Error,
  DeviceMismatch,
  DTypeMismatch,
  ShapeMismatch,
  UnsupportedDType,
  AlreadyInitialized,
  NotCompiled,
  BackendUnavailable,
  OutOfMemory,
  ExecutionError,
  FusionMismatch,
  AutodiffError,
  InvalidArgument,
  ProtocolError,
  UnsupportedOperation,
  AuthenticationFailed,
};
inline constexpr ErrorCode kLastErrorCode = ErrorCode::AuthenticationFailed;

// The code of the exception being handled (call inside a catch block); Error for anything not
// derived from a more specific kiln::Error, OutOfMemory for std::bad_alloc.
ErrorCode current_error_code() noexcept;
// Throws the kiln::Error subclass of code with message (as the server wrote it: "[op] ...").
[[noreturn]] void throw_error(ErrorCode code, const std::string& message);

struct Hello {
  std::uint32_t magic = kProtocolMagic;
  std::uint32_t version = kProtocolVersion;
  std::uint64_t contract = 0;
  std::string token;
};

struct Welcome {
  std::string backend_name;
  DeviceSettings settings;
  std::array<std::uint8_t, kDTypeCount> usage{};  // DTypeUsageSet bits per dtype
  Limits limits;
};

struct Upload {
  std::uint32_t id = 0;
  std::uint64_t hash = 0;
  DType dtype = DType::F32;
  QuantScheme scheme;  // QFloat only
  Shape shape;
  std::uint64_t offset = 0;
  std::span<const std::byte> bytes;  // into the frame it was read from
};

struct Reply {
  std::uint64_t request = 0;
  ErrorCode status = ErrorCode::Ok;
  std::span<const std::byte> body;  // decoded by the waiting request (decode_* below)
};

enum class CommandKind : std::uint8_t {
  Op,
  Free,
  Assign,
  Read,
  Describe,
  Sync,
  Stats,
  Seed,
  Cleanup,
  ResetPeak,
  FromCache,
  Evict,
  Block,
  Bind,
};
inline constexpr CommandKind kLastCommandKind = CommandKind::Bind;

struct Command {
  CommandKind kind = CommandKind::Op;
  ir::Op op;                       // Op
  std::uint32_t id = 0;            // Free, Read, Describe, FromCache; Assign's dst
  std::uint32_t other = 0;         // Assign's src
  std::uint64_t value = 0;         // the request of Read/Describe/Sync/Stats; Seed; a hash
  std::uint32_t block = 0;         // Block, Bind
  std::vector<Command> body;       // Block
  std::vector<std::uint32_t> ids;  // Block, Bind: the ids its local ids stand for
};

// ---- encoding -------------------------------------------------------------------------------

// Starts a frame of kind in out (its length is patched by end_frame).
std::size_t begin_frame(ir::wire::Writer& out, FrameKind kind);
void end_frame(ir::wire::Writer& out, std::size_t start);
// A whole frame of kind (header and body), its body written by write_body(Writer&).
template <class WriteBody>
std::vector<std::byte> encode_frame(FrameKind kind, WriteBody&& write_body) {
  ir::wire::Writer out;
  const std::size_t start = begin_frame(out, kind);
  write_body(out);
  end_frame(out, start);
  return std::move(out).take();
}

void write_hello(ir::wire::Writer& out, const Hello& hello);
void write_welcome(ir::wire::Writer& out, const Welcome& welcome);
void write_refused(ir::wire::Writer& out, ErrorCode code, const std::string& message);
void write_command(ir::wire::Writer& out, const Command& command);
// A reply's header; its body follows (write_data, write_type, write_stats, text).
void write_reply_header(ir::wire::Writer& out, std::uint64_t request, ErrorCode status);
void write_stats(ir::wire::Writer& out, const MemoryStats& stats);

// ---- decoding: each reads a whole frame body, ProtocolError on anything malformed ----------

// The header of a frame: its body length (checked against limit) and kind.
struct FrameHeader {
  std::uint32_t length = 0;
  FrameKind kind = FrameKind::Hello;
};
FrameHeader read_frame_header(std::span<const std::byte, kFrameHeaderBytes> bytes,
                              std::uint64_t limit);

Hello read_hello(std::span<const std::byte> body);
Welcome read_welcome(std::span<const std::byte> body);
// The code and message of a Refused frame.
std::pair<ErrorCode, std::string> read_refused(std::span<const std::byte> body);
// A Commands frame; limits bound nested blocks and their sizes.
std::vector<Command> read_commands(std::span<const std::byte> body, const Limits& limits);
Upload read_upload(std::span<const std::byte> body);
Reply read_reply(std::span<const std::byte> body);
TensorData decode_data(std::span<const std::byte> body);
ir::TensorType decode_type(std::span<const std::byte> body);
MemoryStats decode_stats(std::span<const std::byte> body);
std::string decode_text(std::span<const std::byte> body);

// Whether a and b hold the same token, in time that depends on their lengths only.
bool same_token(std::string_view a, std::string_view b) noexcept;

}  // namespace kiln::remote
