#include "remote/session.h"

#include <algorithm>

#include "contract/contract.h"
#include "core/buffer.h"
#include "ir/check.h"
#include "kiln/quant.h"
#include "remote/infer.h"

namespace kiln::remote {
namespace {

using ir::wire::Writer;

// An upload at least this large has its pages faulted in at once (Session::upload).
constexpr std::size_t kPopulateBytes = std::size_t{1} << 20;

[[noreturn]] void end_session(const std::string& message) {
  throw SessionEnded("[remote] " + message);
}

std::uint64_t bytes_of(const ir::TensorType& type) {
  if (type.dtype == DType::QFloat) return quantized_bytes(stored_shape(type), type.scheme);
  std::uint64_t elements = 1;
  for (std::int64_t dim : type.shape.dims()) {
    if (dim <= 0) return 0;  // empty, or not known yet (a value-shaped result)
    elements *= static_cast<std::uint64_t>(dim);
  }
  return elements * dtype_size(type.dtype);
}

// Whether an inferred type (-1 where the values decide; the client sends 0 there) admits what
// the client said.
bool admits(const ir::TensorType& inferred, const ir::TensorType& told) {
  if (inferred.dtype != told.dtype || inferred.shape.rank() != told.shape.rank() ||
      inferred.scheme != told.scheme || inferred.axes != told.axes) {
    return false;
  }
  for (std::size_t d = 0; d < told.shape.rank(); ++d) {
    if (inferred.shape[d] != (inferred.shape[d] == -1 ? -1 : told.shape[d]) ||
        (inferred.shape[d] == -1 && told.shape[d] != 0)) {
      return false;
    }
  }
  return true;
}

bool fits(const ir::TensorType& inferred, const Primitive& actual) {
  if (actual->dtype() != inferred.dtype || actual->rank() != inferred.shape.rank()) return false;
  for (std::size_t d = 0; d < actual->rank(); ++d) {
    if (inferred.shape[d] != -1 && inferred.shape[d] != actual->shape()[d]) return false;
  }
  return true;
}

}  // namespace

Session::Session(Backend& backend, const Limits& limits, Connection& connection)
    : backend_(backend), limits_(limits), connection_(connection), device_(backend.device()) {}

// Values are released before the backend's memory stats are read by anyone else.
Session::~Session() = default;

void Session::handle(FrameKind kind, std::span<const std::byte> body) {
  switch (kind) {
    case FrameKind::Commands: {
      const std::vector<Command> commands = read_commands(body, limits_);
      for (const Command& command : commands) run(command, {});
      return;
    }
    case FrameKind::Upload:
      upload(read_upload(body));
      return;
    default:
      end_session(kiln::detail::concat("a client may not send frame kind ", static_cast<int>(kind),
                                       " after the handshake"));
  }
}

void Session::run(const Command& c, Bindings bindings) {
  switch (c.kind) {
    case CommandKind::Op:
      run_op(c.op, bindings);
      return;
    case CommandKind::Free:
      free(resolve(c.id, bindings));
      return;
    case CommandKind::Assign:
      assign(resolve(c.id, bindings), resolve(c.other, bindings));
      return;
    default:
      break;
  }
  if (!bindings.empty()) {
    end_session("a block may hold ops, frees and assigns only");
  }
  switch (c.kind) {
    case CommandKind::Read:
      read(c.value, c.id);
      return;
    case CommandKind::Describe:
      describe(c.value, c.id);
      return;
    case CommandKind::Sync:
      try {
        backend_.sync();
        reply(c.value, ErrorCode::Ok);
      } catch (...) {
        reply_failure(c.value, *current_failure());
      }
      return;
    case CommandKind::Stats: {
      Writer out;
      write_stats(out, backend_.memory_stats());
      const std::vector<std::byte> body = std::move(out).take();
      reply(c.value, ErrorCode::Ok, body);
      return;
    }
    case CommandKind::Seed:
      backend_.seed(c.value);
      return;
    case CommandKind::Cleanup:
      backend_.memory_cleanup();
      return;
    case CommandKind::ResetPeak:
      backend_.reset_peak_memory();
      return;
    case CommandKind::FromCache:
      from_cache(c.id, c.value);
      return;
    case CommandKind::Evict:
      if (const auto found = cache_.find(c.value); found != cache_.end()) {
        bytes_ -= std::min(bytes_, bytes_of(found->second.second));
        cache_.erase(found);
      }
      failed_uploads_.erase(c.value);
      return;
    case CommandKind::Block:
      if (c.block >= blocks_.size()) blocks_.resize(c.block + 1);
      blocks_[c.block] = c.body;
      [[fallthrough]];
    case CommandKind::Bind: {
      if (c.block >= blocks_.size() || blocks_[c.block].empty()) {
        end_session(kiln::detail::concat("block ", c.block, " was never defined"));
      }
      ++totals_.blocks_run;
      for (const Command& inner : blocks_[c.block]) run(inner, c.ids);
      return;
    }
    default:
      end_session("unknown command");
  }
}

std::uint32_t Session::resolve(std::uint32_t id, Bindings bindings) const {
  if (bindings.empty()) return id;
  if (id >= bindings.size()) {
    end_session(kiln::detail::concat("block id ", id, " past its ", bindings.size(), " bindings"));
  }
  return bindings[id];
}

Session::Slot& Session::held(std::uint32_t id, const char* what) {
  if (id >= slots_.size() || !slots_[id].bound) {
    end_session(kiln::detail::concat(what, " id ", id, ", which holds no value"));
  }
  return slots_[id];
}

Session::Slot& Session::fresh(std::uint32_t id, const char* what) {
  if (id >= limits_.max_tensors) {
    end_session(kiln::detail::concat(what, " id ", id, " past the session's limit of ",
                                     limits_.max_tensors, " tensors"));
  }
  if (id >= slots_.size()) {
    const std::size_t size = std::min<std::size_t>(
        limits_.max_tensors, std::max<std::size_t>(id + 1, slots_.size() * 2));
    slots_.resize(size);
    values_.resize(size);
  }
  if (slots_[id].bound || uploads_.contains(id)) {
    end_session(kiln::detail::concat(what, " id ", id, ", which holds a value"));
  }
  return slots_[id];
}

void Session::bind(std::uint32_t id, Primitive value, const ir::TensorType& type,
                   bool shares_cache) {
  Slot& slot = slots_[id];
  slot.bound = true;
  slot.failure.reset();
  slot.type = type;  // with a QFloat value's scheme and axes
  slot.type.shape = value->shape();
  slot.bytes = shares_cache ? 0 : bytes_of(type);
  slot.shares_cache = shares_cache;
  bytes_ += slot.bytes;
  values_[id] = std::move(value);
}

void Session::bind_failure(std::uint32_t id, const ir::TensorType& type,
                           std::shared_ptr<const Failure> failure) {
  Slot& slot = slots_[id];
  slot.bound = true;
  slot.failure = std::move(failure);
  slot.type = type;
  slot.bytes = 0;
  slot.shares_cache = false;
  values_[id].reset();
  ++totals_.failed_ops;
}

std::shared_ptr<const Session::Failure> Session::current_failure() {
  const ErrorCode code = current_error_code();
  try {
    throw;
  } catch (const std::exception& e) {
    return std::make_shared<const Failure>(Failure{code, e.what()});
  } catch (...) {
    return std::make_shared<const Failure>(Failure{code, "[remote] unknown error"});
  }
}

void Session::reserve_bytes(std::uint64_t bytes, const char* op) {
  if (bytes > limits_.max_session_bytes - std::min(bytes_, limits_.max_session_bytes)) {
    kiln::detail::fail<OutOfMemory>(op, "the server allows a session ", limits_.max_session_bytes,
                                    " bytes; it holds ", bytes_, " and this needs ", bytes,
                                    " more");
  }
}

void Session::run_op(const ir::Op& sent, Bindings bindings) {
  ++totals_.ops;
  ir::Op op = sent;
  for (ir::TensorId& id : op.inputs) {
    if (id != ir::kNoTensor) id.index = resolve(id.index, bindings);
  }
  for (ir::TensorId& id : op.outputs) id.index = resolve(id.index, bindings);
  const ir::OpSignature& signature = ir::signature(op.code);
  const OpInfo& info = op_info(op.code);
  if (signature.read) end_session(std::string(signature.name) + ": reads travel as Read commands");
  const ir::internal::Defined defined{[](const void* context, std::uint32_t id) {
                                        const auto& slots =
                                            *static_cast<const std::vector<Slot>*>(context);
                                        return id < slots.size() && slots[id].bound;
                                      },
                                      &slots_};
  ir::internal::check_op(op, defined, totals_.ops,
                         [](std::string message) { end_session(message); });
  // (First: fresh() may grow the table that input_types points into.)
  for (std::size_t j = 0; j < op.outputs.size(); ++j) fresh(op.outputs[j].index, "an op writes");
  std::vector<const ir::TensorType*> input_types(op.inputs.size(), nullptr);
  std::shared_ptr<const Failure> failed;
  for (std::size_t k = 0; k < op.inputs.size(); ++k) {
    if (op.inputs[k] == ir::kNoTensor) continue;
    const Slot& slot = slots_[op.inputs[k].index];
    input_types[k] = &slot.type;
    if (slot.failure && !failed) failed = slot.failure;
  }
  // Two outputs with one id would leave a value unaccounted for.
  if (op.outputs.size() == 2 && op.outputs[0] == op.outputs[1]) {
    end_session(std::string(signature.name) + ": both results have one id");
  }
  auto fail_outputs = [&](const std::shared_ptr<const Failure>& failure) {
    for (std::size_t j = 0; j < op.outputs.size(); ++j)
      bind_failure(op.outputs[j].index, op.output_types[j], failure);
  };
  if (failed) return fail_outputs(failed);

  std::vector<ir::TensorType> types;
  try {
    types = infer_types(op, input_types);
  } catch (...) {
    return fail_outputs(current_failure());
  }
  for (std::size_t j = 0; j < types.size(); ++j) {
    if (!admits(types[j], op.output_types[j])) {
      end_session(kiln::detail::concat(signature.name, ": the client expects ",
                                       dtype_name(op.output_types[j].dtype), " ",
                                       op.output_types[j].shape, " for result ", j, ", it is ",
                                       dtype_name(types[j].dtype), " ", types[j].shape));
    }
  }
  // Every device the client names is this server's.
  for (ir::Attribute& attribute : op.attributes) {
    if (std::holds_alternative<ir::DeviceAttr>(attribute)) attribute = ir::DeviceAttr::of(device_);
  }
  try {
    std::uint64_t bytes = 0;
    for (const ir::TensorType& type : types) bytes += bytes_of(type);
    reserve_bytes(bytes, signature.name.data());
    // A view of a cached upload would share the cache's storage and miss later writes to the
    // tensor it was taken of (assign gives that tensor storage of its own): the tensor gets its
    // own copy first.
    if (info.strided_view) {
      for (ir::TensorId id : op.inputs) {
        if (id != ir::kNoTensor && slots_[id.index].shares_cache) materialize(id.index);
      }
    }
    ir::replay_unchecked(backend_, op, values_, reads_, {});
  } catch (...) {
    for (ir::TensorId id : op.outputs) values_[id.index].reset();
    return fail_outputs(current_failure());
  }
  for (std::size_t j = 0; j < op.outputs.size(); ++j) {
    const std::uint32_t id = op.outputs[j].index;
    Primitive value = std::move(values_[id]);
    if (!value || !fits(types[j], value)) {
      const std::string message = kiln::detail::concat(
          "[", signature.name, "] the server's backend gave ",
          value ? std::string(dtype_name(value->dtype())) + " " + value->shape().to_string()
                : std::string("nothing"),
          " for result ", j, ", expected ", dtype_name(types[j].dtype), " ", types[j].shape);
      bind_failure(id, op.output_types[j],
                   std::make_shared<const Failure>(Failure{ErrorCode::ExecutionError, message}));
      continue;
    }
    // An input handed back as the result (a cast to its own dtype, say) is a view too.
    for (ir::TensorId input : op.inputs) {
      if (input == ir::kNoTensor || !slots_[input.index].shares_cache) continue;
      if (values_[input.index] != value) continue;
      try {
        materialize(input.index);
      } catch (...) {
        bind_failure(id, op.output_types[j], current_failure());
        value.reset();
        break;
      }
      value = values_[input.index];
    }
    if (value) bind(id, std::move(value), types[j], false);
  }
}

void Session::upload(const Upload& chunk) {
  bool copied = false;  // the chunk's bytes are in the buffer already
  if (chunk.offset == 0) {
    fresh(chunk.id, "an upload writes");
    const bool blocks = chunk.dtype == DType::QFloat;
    ir::TensorType type{chunk.dtype, chunk.shape, chunk.scheme};
    ir::internal::check_type(type, "upload", [](std::string message) { end_session(message); });
    // An honest client's blocks fit their shape (TensorData::quantized checked them).
    if (std::string problem = quant_problem(type); !problem.empty())
      end_session("upload id " + std::to_string(chunk.id) + ": " + problem);
    // The product of the dims that are not 0, saturating past the limit: a shape such as
    // [0, 2^62] holds nothing, and is still refused, as TensorData refuses it.
    std::uint64_t elements = 1;
    bool empty = false;
    for (std::int64_t dim : chunk.shape.dims()) {
      if (dim == 0) {
        empty = true;
      } else if (elements > (limits_.max_session_bytes + 1) / static_cast<std::uint64_t>(dim)) {
        elements = limits_.max_session_bytes + 1;
      } else {
        elements *= static_cast<std::uint64_t>(dim);
      }
    }
    const std::uint64_t total = blocks  ? bytes_of(type)
                                : empty ? 0
                                        : elements * dtype_size(chunk.dtype);
    try {
      // A tensor larger than a whole session may hold is sent by an honest client whose user
      // made one: an OutOfMemory at its read, like an op's result that does not fit, not the
      // end of the session.
      if ((!blocks && elements > limits_.max_session_bytes) || total > limits_.max_session_bytes) {
        kiln::detail::fail<OutOfMemory>("upload", dtype_name(chunk.dtype), " ", chunk.shape,
                                        " is larger than the server allows a session (",
                                        limits_.max_session_bytes, " bytes)");
      }
      reserve_bytes(total, "upload");
    } catch (const OutOfMemory&) {
      // Kept as the value's failure: the client reads it back as an OutOfMemory.
      return fail_upload(chunk.id, chunk.hash, type);
    }
    PendingUpload pending;
    pending.type = blocks ? type : ir::TensorType{chunk.dtype, chunk.shape};
    pending.hash = chunk.hash;
    // Filled once, in order, as the chunks arrive: in 4 KiB pages (core/buffer.h).
    const kiln::detail::SmallPages small_pages;
    // Only a CPU server's tensors are host memory (a GPU's empty() would be an allocation made
    // for nothing).
    if (!blocks && total > 0 && device_.kind() == DeviceKind::Cpu) {
      try {
        pending.tensor = backend_.empty(chunk.shape, chunk.dtype, device_);
      } catch (...) {
        return fail_upload(chunk.id, chunk.hash, type);
      }
      pending.target = backend_.host_bytes(pending.tensor);
      if (pending.target.size() != total) {
        pending.tensor.reset();
        pending.target = {};
      }
      // Its pages faulted in by one call before the chunks are copied in, not one fault per
      // 4 KiB as they are (64 MiB uploads into new memory on the development VM: 50-59 ms
      // against 57-66). Small tensors are not worth the call.
      if (pending.target.size() >= kPopulateBytes) {
        (void)kiln::detail::populate_for_writing(pending.target.data(), pending.target.size());
      }
    }
    if (!pending.tensor) {
      // The first chunk (for most uploads the whole tensor) is copied in as the buffer is made,
      // with no zeroing pass before it.
      copied = chunk.bytes.size() <= total;
      std::vector<std::byte> bytes =
          kiln::detail::allocate_bytes(total, copied ? chunk.bytes : std::span<const std::byte>{});
      pending.data = blocks ? TensorData::quantized(std::move(bytes), chunk.shape, chunk.scheme)
                            : TensorData(std::move(bytes), chunk.shape, chunk.dtype);
      pending.target = pending.data.bytes();
    }
    uploads_.emplace(chunk.id, std::move(pending));
    bytes_ += total;  // held while it arrives; moved to the slot when complete
  } else if (slots_.size() > chunk.id && slots_[chunk.id].bound && slots_[chunk.id].failure) {
    return;  // the rest of an upload that did not fit
  }
  const auto found = uploads_.find(chunk.id);
  if (found == uploads_.end()) {
    end_session(kiln::detail::concat("a chunk at offset ", chunk.offset, " for id ", chunk.id,
                                     ", which has no upload in progress"));
  }
  PendingUpload& pending = found->second;
  const std::span<std::byte> target = pending.target;
  if (chunk.offset != pending.received || chunk.bytes.size() > target.size() - chunk.offset ||
      chunk.dtype != pending.type.dtype || chunk.shape != pending.type.shape ||
      chunk.hash != pending.hash ||
      (chunk.dtype == DType::QFloat && chunk.scheme != pending.type.scheme)) {
    end_session(kiln::detail::concat("upload id ", chunk.id, ": a chunk of ", chunk.bytes.size(),
                                     " bytes at offset ", chunk.offset, " after ", pending.received,
                                     " of ", target.size(),
                                     " bytes (chunks come in order and agree on the tensor)"));
  }
  if (!copied && !chunk.bytes.empty())
    std::memcpy(target.data() + chunk.offset, chunk.bytes.data(), chunk.bytes.size());
  pending.received += chunk.bytes.size();
  if (pending.received != target.size()) return;

  PendingUpload done = std::move(pending);
  uploads_.erase(found);
  const std::uint64_t total = done.target.size();
  bytes_ -= total;
  ++totals_.uploads;
  totals_.upload_bytes += total;
  const ir::TensorType type = done.type;
  Primitive value = std::move(done.tensor);
  if (!value) {
    try {
      value = backend_.from_data(std::move(done.data), device_);
    } catch (...) {
      return fail_upload(chunk.id, done.hash, type);
    }
  }
  // Content the cache holds already (a client that sent it again) keeps the cached value; this
  // one is the slot's own and counted as such, or repeated uploads would escape the limit.
  const bool cached = done.hash != 0 && !cache_.contains(done.hash);
  if (cached) {
    cache_.emplace(done.hash, std::pair{value, type});
    failed_uploads_.erase(done.hash);
    bytes_ += total;  // the cache's reference; the slot counts nothing while it shares it
  }
  bind(chunk.id, std::move(value), type, cached);
}

void Session::fail_upload(std::uint32_t id, std::uint64_t hash, const ir::TensorType& type) {
  std::shared_ptr<const Failure> failure = current_failure();
  // The client counts the content as cached once sent, whether or not it fitted: a FromCache of
  // it fails the same way (at its read) instead of ending the session.
  if (hash != 0) failed_uploads_[hash] = {type, failure};
  bind_failure(id, type, std::move(failure));
}

void Session::from_cache(std::uint32_t id, std::uint64_t hash) {
  fresh(id, "a cached upload writes");
  const auto found = cache_.find(hash);
  if (found == cache_.end()) {
    const auto failed = failed_uploads_.find(hash);
    if (failed == failed_uploads_.end())
      end_session(kiln::detail::concat("no cached upload ", hash));
    ++totals_.cache_hits;
    return bind_failure(id, failed->second.first, failed->second.second);
  }
  ++totals_.cache_hits;
  bind(id, found->second.first, found->second.second, true);
}

void Session::materialize(std::uint32_t id) {
  Slot& slot = slots_[id];
  const std::uint64_t bytes = bytes_of(slot.type);
  reserve_bytes(bytes, "upload");
  // A cached upload is in stored order: a QFloat one's blocks copy through its data.
  if (slot.type.dtype == DType::QFloat) {
    values_[id] = backend_.from_data(backend_.into_data(values_[id]).get(), device_);
  } else {
    Primitive own = backend_.empty(slot.type.shape, slot.type.dtype, device_);
    backend_.assign(own, values_[id]);
    values_[id] = std::move(own);
  }
  slot.shares_cache = false;
  bytes_ += bytes - std::min(bytes, slot.bytes);
  slot.bytes = bytes;
}

void Session::free(std::uint32_t id) {
  Slot& slot = held(id, "a free of");
  bytes_ -= std::min(bytes_, slot.bytes);
  slot = Slot{};
  values_[id].reset();
}

void Session::assign(std::uint32_t dst, std::uint32_t src) {
  Slot& to = held(dst, "an assign to");
  const Slot& from = held(src, "an assign from");
  if (to.type != from.type) {
    end_session(kiln::detail::concat("assign of ", dtype_name(from.type.dtype), " ",
                                     from.type.shape, " to ", dtype_name(to.type.dtype), " ",
                                     to.type.shape));
  }
  if (to.failure) return;
  if (from.failure) {
    to.failure = from.failure;
    bytes_ -= std::min(bytes_, to.bytes);
    to.bytes = 0;
    values_[dst].reset();
    return;
  }
  try {
    // The cache keeps what was uploaded: dst gets storage of its own first (no view of dst
    // exists yet: taking one gives dst its own storage too).
    if (to.shares_cache) materialize(dst);
    backend_.assign(values_[dst], values_[src]);
  } catch (...) {
    to.failure = current_failure();
    bytes_ -= std::min(bytes_, to.bytes);
    to.bytes = 0;
    values_[dst].reset();
  }
}

void Session::read(std::uint64_t request, std::uint32_t id) {
  const Slot& slot = held(id, "a read of");
  ++totals_.reads;
  if (slot.failure) return reply_failure(request, *slot.failure);
  TensorData data;
  try {
    data = backend_.into_data(values_[id]).get();
  } catch (...) {
    return reply_failure(request, *current_failure());
  }
  totals_.read_bytes += data.bytes().size();
  // The bytes go out as they are, after a header: no copy of a large result into the frame.
  Writer head;
  const std::size_t start = begin_frame(head, FrameKind::Reply);
  write_reply_header(head, request, ErrorCode::Ok);
  ir::wire::write_data_head(head, data);
  head.u64(data.bytes().size());
  const std::size_t length = head.size() - start - kFrameHeaderBytes + data.bytes().size();
  if (length > std::numeric_limits<std::uint32_t>::max()) {
    return reply_failure(request, Failure{ErrorCode::InvalidArgument,
                                          kiln::detail::concat("[into_data] ", data.bytes().size(),
                                                               " bytes do not fit one frame")});
  }
  head.patch_u32(start, static_cast<std::uint32_t>(length));
  const std::vector<std::byte> header = std::move(head).take();
  const asio::const_buffer buffers[] = {asio::buffer(header),
                                        asio::buffer(data.bytes().data(), data.bytes().size())};
  connection_.send(buffers);
}

void Session::describe(std::uint64_t request, std::uint32_t id) {
  const Slot& slot = held(id, "a describe of");
  if (slot.failure) return reply_failure(request, *slot.failure);
  Writer out;
  out.type(slot.type);
  const std::vector<std::byte> body = std::move(out).take();
  reply(request, ErrorCode::Ok, body);
}

void Session::reply(std::uint64_t request, ErrorCode status, std::span<const std::byte> body) {
  connection_.send(encode_frame(FrameKind::Reply, [&](Writer& out) {
    write_reply_header(out, request, status);
    out.raw(body);
  }));
}

void Session::reply_failure(std::uint64_t request, const Failure& failure) {
  Writer out;
  out.text(failure.message);
  const std::vector<std::byte> body = std::move(out).take();
  reply(request, failure.code == ErrorCode::Ok ? ErrorCode::Error : failure.code, body);
}

}  // namespace kiln::remote
