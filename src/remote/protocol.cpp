// Encoding and decoding of the remote protocol's frames (layout in protocol.h). Decoders read a
// frame body that the caller has received whole; every field is checked by ir::wire::Reader,
// which never reads past the body and refuses counts that cannot fit in what is left.
#include "remote/protocol.h"

#include <new>

#include "contract/contract.h"

namespace kiln::remote {
namespace {

using ir::wire::Reader;
using ir::wire::Writer;

constexpr std::string_view kWhere = "remote";

// Nesting of blocks: a Block's body holds ops, frees and reads, never another block.
std::vector<Command> read_command_list(Reader& in, const Limits& limits, bool in_block);

Command read_command(Reader& in, const Limits& limits, bool in_block, std::size_t position) {
  Command c;
  c.kind = in.enumeration(kLastCommandKind, "command kind");
  switch (c.kind) {
    case CommandKind::Op:
      c.op = ir::wire::read_op(in, position);
      in.set_context("");
      break;
    case CommandKind::Free:
      c.id = in.u32("freed id");
      break;
    case CommandKind::Assign:
      c.id = in.u32("assign destination");
      c.other = in.u32("assign source");
      break;
    case CommandKind::Read:
    case CommandKind::Describe:
      c.value = in.u64("request");
      c.id = in.u32("id read");
      break;
    case CommandKind::Sync:
    case CommandKind::Stats:
      c.value = in.u64("request");
      break;
    case CommandKind::Seed:
      c.value = in.u64("seed");
      break;
    case CommandKind::Cleanup:
    case CommandKind::ResetPeak:
      break;
    case CommandKind::FromCache:
      c.id = in.u32("cached id");
      c.value = in.u64("content hash");
      break;
    case CommandKind::Evict:
      c.value = in.u64("content hash");
      break;
    case CommandKind::Block:
    case CommandKind::Bind: {
      if (in_block) in.fail("a block inside a block");
      c.block = in.u32("block");
      if (c.block >= limits.max_blocks) {
        in.fail(kiln::detail::concat("block ", c.block, " is past the session's limit of ",
                                     limits.max_blocks));
      }
      if (c.kind == CommandKind::Block) c.body = read_command_list(in, limits, true);
      const std::size_t n = in.count(4, "block bindings");
      c.ids.resize(n);
      for (std::uint32_t& id : c.ids) id = in.u32("block binding");
      break;
    }
  }
  return c;
}

std::vector<Command> read_command_list(Reader& in, const Limits& limits, bool in_block) {
  const std::size_t n = in.count(1, "commands");
  if (in_block && n > limits.max_block_commands) {
    in.fail(kiln::detail::concat("a block of ", n, " commands (limit ", limits.max_block_commands,
                                 ")"));
  }
  std::vector<Command> commands;
  commands.reserve(n);
  for (std::size_t i = 0; i < n; ++i) commands.push_back(read_command(in, limits, in_block, i));
  return commands;
}

void finish(Reader& in, std::string_view what) {
  if (in.left() != 0) in.fail(kiln::detail::concat(in.left(), " bytes left over after ", what));
}

}  // namespace

ErrorCode current_error_code() noexcept {
  try {
    throw;
  } catch (const DeviceMismatch&) {
    return ErrorCode::DeviceMismatch;
  } catch (const DTypeMismatch&) {
    return ErrorCode::DTypeMismatch;
  } catch (const ShapeMismatch&) {
    return ErrorCode::ShapeMismatch;
  } catch (const UnsupportedDType&) {
    return ErrorCode::UnsupportedDType;
  } catch (const AlreadyInitialized&) {
    return ErrorCode::AlreadyInitialized;
  } catch (const NotCompiled&) {
    return ErrorCode::NotCompiled;
  } catch (const BackendUnavailable&) {
    return ErrorCode::BackendUnavailable;
  } catch (const OutOfMemory&) {
    return ErrorCode::OutOfMemory;
  } catch (const ExecutionError&) {
    return ErrorCode::ExecutionError;
  } catch (const FusionMismatch&) {
    return ErrorCode::FusionMismatch;
  } catch (const AutodiffError&) {
    return ErrorCode::AutodiffError;
  } catch (const InvalidArgument&) {
    return ErrorCode::InvalidArgument;
  } catch (const ProtocolError&) {
    return ErrorCode::ProtocolError;
  } catch (const UnsupportedOperation&) {
    return ErrorCode::UnsupportedOperation;
  } catch (const AuthenticationFailed&) {
    return ErrorCode::AuthenticationFailed;
  } catch (const std::bad_alloc&) {
    return ErrorCode::OutOfMemory;
  } catch (...) {
    return ErrorCode::Error;
  }
}

void throw_error(ErrorCode code, const std::string& message) {
  switch (code) {
    case ErrorCode::Ok:
    case ErrorCode::Error:
      throw Error(message);
    case ErrorCode::DeviceMismatch:
      throw DeviceMismatch(message);
    case ErrorCode::DTypeMismatch:
      throw DTypeMismatch(message);
    case ErrorCode::ShapeMismatch:
      throw ShapeMismatch(message);
    case ErrorCode::UnsupportedDType:
      throw UnsupportedDType(message);
    case ErrorCode::AlreadyInitialized:
      throw AlreadyInitialized(message);
    case ErrorCode::NotCompiled:
      throw NotCompiled(message);
    case ErrorCode::BackendUnavailable:
      throw BackendUnavailable(message);
    case ErrorCode::OutOfMemory:
      throw OutOfMemory(message);
    case ErrorCode::ExecutionError:
      throw ExecutionError(message);
    case ErrorCode::FusionMismatch:
      throw FusionMismatch(message);
    case ErrorCode::AutodiffError:
      throw AutodiffError(message);
    case ErrorCode::InvalidArgument:
      throw InvalidArgument(message);
    case ErrorCode::ProtocolError:
      throw ProtocolError(message);
    case ErrorCode::UnsupportedOperation:
      throw UnsupportedOperation(message);
    case ErrorCode::AuthenticationFailed:
      throw AuthenticationFailed(message);
  }
  throw Error(message);
}

// ---- encoding ----

std::size_t begin_frame(Writer& out, FrameKind kind) {
  const std::size_t start = out.size();
  out.u32(0);
  out.u8(static_cast<std::uint8_t>(kind));
  return start;
}

void end_frame(Writer& out, std::size_t start) {
  const std::size_t length = out.size() - start - kFrameHeaderBytes;
  if (length > std::numeric_limits<std::uint32_t>::max()) {
    kiln::detail::fail<InvalidArgument>("remote", "a frame of ", length, " bytes");
  }
  out.patch_u32(start, static_cast<std::uint32_t>(length));
}

void write_hello(Writer& out, const Hello& hello) {
  out.u32(hello.magic);
  out.u32(hello.version);
  out.u64(hello.contract);
  out.text(hello.token);
}

void write_welcome(Writer& out, const Welcome& welcome) {
  out.text(welcome.backend_name);
  out.u8(static_cast<std::uint8_t>(welcome.settings.float_dtype));
  out.u8(static_cast<std::uint8_t>(welcome.settings.int_dtype));
  out.u8(static_cast<std::uint8_t>(welcome.settings.bool_dtype));
  for (std::uint8_t bits : welcome.usage) out.u8(bits);
  out.u64(welcome.limits.max_frame_bytes);
  out.u64(welcome.limits.max_session_bytes);
  out.u32(welcome.limits.max_tensors);
  out.u32(welcome.limits.max_blocks);
  out.u32(welcome.limits.max_block_commands);
}

void write_refused(Writer& out, ErrorCode code, const std::string& message) {
  out.u8(static_cast<std::uint8_t>(code));
  out.text(message);
}

void write_command(Writer& out, const Command& c) {
  out.u8(static_cast<std::uint8_t>(c.kind));
  switch (c.kind) {
    case CommandKind::Op:
      ir::wire::write_op(out, c.op);
      break;
    case CommandKind::Free:
      out.u32(c.id);
      break;
    case CommandKind::Assign:
      out.u32(c.id);
      out.u32(c.other);
      break;
    case CommandKind::Read:
    case CommandKind::Describe:
      out.u64(c.value);
      out.u32(c.id);
      break;
    case CommandKind::Sync:
    case CommandKind::Stats:
    case CommandKind::Seed:
    case CommandKind::Evict:
      out.u64(c.value);
      break;
    case CommandKind::Cleanup:
    case CommandKind::ResetPeak:
      break;
    case CommandKind::FromCache:
      out.u32(c.id);
      out.u64(c.value);
      break;
    case CommandKind::Block:
    case CommandKind::Bind:
      out.u32(c.block);
      if (c.kind == CommandKind::Block) {
        out.count(c.body.size());
        for (const Command& inner : c.body) write_command(out, inner);
      }
      out.count(c.ids.size());
      for (std::uint32_t id : c.ids) out.u32(id);
      break;
  }
}

void write_reply_header(Writer& out, std::uint64_t request, ErrorCode status) {
  out.u64(request);
  out.u8(static_cast<std::uint8_t>(status));
}

void write_stats(Writer& out, const MemoryStats& stats) {
  out.i64(stats.bytes_in_use);
  out.i64(stats.bytes_reserved);
  out.i64(stats.peak_bytes_in_use);
}

// ---- decoding ----

FrameHeader read_frame_header(std::span<const std::byte, kFrameHeaderBytes> bytes,
                              std::uint64_t limit) {
  Reader in(bytes, 0, kWhere);
  FrameHeader header;
  header.length = in.u32("frame length");
  header.kind = in.enumeration(kLastFrameKind, "frame kind");
  if (header.length > limit) {
    in.fail(kiln::detail::concat("a frame of ", header.length, " bytes (limit ", limit, ")"));
  }
  return header;
}

Hello read_hello(std::span<const std::byte> body) {
  Reader in(body, kFrameHeaderBytes, kWhere);
  Hello hello;
  hello.magic = in.u32("magic");
  if (hello.magic != kProtocolMagic) {
    in.fail(kiln::detail::concat("not a kiln client (magic ", hello.magic, ")"));
  }
  hello.version = in.u32("protocol version");
  hello.contract = in.u64("contract hash");
  hello.token = in.text("token");
  finish(in, "the hello");
  return hello;
}

Welcome read_welcome(std::span<const std::byte> body) {
  Reader in(body, kFrameHeaderBytes, kWhere);
  Welcome welcome;
  welcome.backend_name = in.text("backend name");
  welcome.settings.float_dtype = in.dtype("default float dtype");
  welcome.settings.int_dtype = in.dtype("default int dtype");
  welcome.settings.bool_dtype = in.dtype("default bool dtype");
  for (std::uint8_t& bits : welcome.usage) bits = in.u8("dtype usage");
  welcome.limits.max_frame_bytes = in.u64("max frame bytes");
  welcome.limits.max_session_bytes = in.u64("max session bytes");
  welcome.limits.max_tensors = in.u32("max tensors");
  welcome.limits.max_blocks = in.u32("max blocks");
  welcome.limits.max_block_commands = in.u32("max block commands");
  finish(in, "the welcome");
  return welcome;
}

std::pair<ErrorCode, std::string> read_refused(std::span<const std::byte> body) {
  Reader in(body, kFrameHeaderBytes, kWhere);
  const ErrorCode code = in.enumeration(kLastErrorCode, "error code");
  std::string message = in.text("message");
  finish(in, "the refusal");
  return {code, std::move(message)};
}

std::vector<Command> read_commands(std::span<const std::byte> body, const Limits& limits) {
  Reader in(body, kFrameHeaderBytes, kWhere);
  std::vector<Command> commands = read_command_list(in, limits, false);
  finish(in, "the commands");
  return commands;
}

Upload read_upload(std::span<const std::byte> body) {
  Reader in(body, kFrameHeaderBytes, kWhere);
  Upload upload;
  upload.id = in.u32("upload id");
  upload.hash = in.u64("content hash");
  upload.dtype = in.dtype("upload dtype");
  if (upload.dtype == DType::QFloat) upload.scheme = ir::wire::read_scheme(in);
  upload.shape = in.shape("upload shape");
  upload.offset = in.u64("upload offset");
  const std::uint64_t n = in.u64("chunk length");
  if (n > in.left()) {
    in.fail(kiln::detail::concat("truncated: a chunk of ", n, " bytes, ", in.left(), " left"));
  }
  upload.bytes = in.take(static_cast<std::size_t>(n), "chunk");
  finish(in, "the upload");
  return upload;
}

Reply read_reply(std::span<const std::byte> body) {
  Reader in(body, kFrameHeaderBytes, kWhere);
  Reply reply;
  reply.request = in.u64("request");
  reply.status = in.enumeration(kLastErrorCode, "status");
  reply.body = in.take(in.left(), "reply body");
  return reply;
}

TensorData decode_data(std::span<const std::byte> body) {
  Reader in(body, 0, kWhere);
  TensorData data = ir::wire::read_data(in);
  finish(in, "the data");
  return data;
}

ir::TensorType decode_type(std::span<const std::byte> body) {
  Reader in(body, 0, kWhere);
  ir::TensorType type = in.type("type");
  finish(in, "the type");
  return type;
}

MemoryStats decode_stats(std::span<const std::byte> body) {
  Reader in(body, 0, kWhere);
  MemoryStats stats;
  stats.bytes_in_use = in.i64("bytes in use");
  stats.bytes_reserved = in.i64("bytes reserved");
  stats.peak_bytes_in_use = in.i64("peak bytes in use");
  finish(in, "the stats");
  return stats;
}

std::string decode_text(std::span<const std::byte> body) {
  Reader in(body, 0, kWhere);
  std::string text = in.text("message");
  finish(in, "the message");
  return text;
}

bool same_token(std::string_view a, std::string_view b) noexcept {
  // Every byte of the expected token a is compared, whatever matched before; b's bytes are read
  // cyclically, so the time depends on a's length only.
  unsigned difference = a.size() != b.size() ? 1u : 0u;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const char other = b.empty() ? '\0' : b[i % b.size()];
    difference |= static_cast<unsigned char>(a[i] ^ other);
  }
  return difference == 0 && !a.empty();
}

}  // namespace kiln::remote
