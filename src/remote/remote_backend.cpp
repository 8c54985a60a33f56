#include "remote/remote_backend.h"

#include <future>

#include "ir/op_ir.h"
#include "kiln/detail/map_macro.h"
#include "remote/infer.h"
#include "runtime/registry.h"

namespace kiln::remote {
namespace {

// The ids of an op's tensor inputs, and their types in the same order.
class Inputs final : public ir::IdSource {
 public:
  Inputs(const RemoteBackend& backend, std::string_view op) : backend_(backend), op_(op) {}

  ir::TensorId id_of(const Primitive& p) override {
    const RemoteTensor& tensor = backend_.remote_tensor(p, op_);
    types.push_back(tensor.type());
    return {tensor.id()};
  }
  std::vector<ir::TensorType> types;

 private:
  const RemoteBackend& backend_;
  std::string_view op_;
};

template <class Result>
Result results_as(std::vector<Primitive>&& results) {
  if constexpr (std::is_same_v<Result, Primitive>) {
    return std::move(results[0]);
  } else {
    static_assert(std::is_same_v<Result, PrimitivePair>, "reads are written out");
    return {std::move(results[0]), std::move(results[1])};
  }
}

// Sends a request of kind about id; its future gets decode(the reply's body), or the reply's
// error (the server's, with its type and message, or the lost connection's).
template <class T, class Decode>
std::future<T> ask(Channel& channel, CommandKind kind, std::uint32_t id, Decode decode) {
  auto answer = std::make_shared<std::promise<T>>();
  std::future<T> future = answer->get_future();
  Command c;
  c.kind = kind;
  c.id = id;
  channel.request(std::move(c), [answer, decode](ErrorCode status, std::span<const std::byte> body,
                                                 std::exception_ptr lost) {
    try {
      if (lost) std::rethrow_exception(lost);
      if (status != ErrorCode::Ok) throw_error(status, decode_text(body));
      if constexpr (std::is_void_v<T>) {
        answer->set_value();
      } else {
        answer->set_value(decode(body));
      }
    } catch (...) {
      answer->set_exception(std::current_exception());
    }
  });
  return future;
}

}  // namespace

RemoteBackend::RemoteBackend(Device device, const std::string& address, const std::string& token)
    : device_(device), channel_(std::make_unique<Channel>(address, token)) {}

std::string RemoteBackend::name() const {
  return "remote<" + channel_->address() + " " + channel_->welcome().backend_name + ">";
}

DTypeUsageSet RemoteBackend::dtype_usage(DType dtype) const {
  const auto d = static_cast<std::size_t>(dtype);
  DTypeUsageSet usage;
  if (d >= kDTypeCount) return usage;
  const std::uint8_t bits = channel_->welcome().usage[d];
  for (DTypeUsage u : {DTypeUsage::Storage, DTypeUsage::Arithmetic, DTypeUsage::Accelerated}) {
    if ((bits & static_cast<std::uint8_t>(u)) != 0) usage.insert(u);
  }
  return usage;
}

void RemoteBackend::simple_command(CommandKind kind, std::uint64_t value) {
  Command c;
  c.kind = kind;
  c.value = value;
  channel_->enqueue(std::move(c));
}

void RemoteBackend::seed(std::uint64_t seed) { simple_command(CommandKind::Seed, seed); }
void RemoteBackend::memory_cleanup() { simple_command(CommandKind::Cleanup); }
void RemoteBackend::reset_peak_memory() { simple_command(CommandKind::ResetPeak); }

void RemoteBackend::sync() {
  ask<void>(*channel_, CommandKind::Sync, 0, [](std::span<const std::byte>) {}).get();
}

MemoryStats RemoteBackend::memory_stats() const {
  return ask<MemoryStats>(*channel_, CommandKind::Stats, 0, decode_stats).get();
}

const RemoteTensor& RemoteBackend::remote_tensor(const Primitive& p, std::string_view op) const {
  const auto* tensor = dynamic_cast<const RemoteTensor*>(p.get());
  if (tensor == nullptr || tensor->channel() != channel_.get()) {
    detail::fail<DeviceMismatch>(op, "a tensor on ", p->device().to_string(), " given to ",
                                 device_.to_string());
  }
  return *tensor;
}

void RemoteBackend::assign(const Primitive& dst, Primitive src) {
  Command c;
  c.kind = CommandKind::Assign;
  c.id = remote_tensor(dst, "assign").id();
  c.other = remote_tensor(src, "assign").id();
  channel_->enqueue(std::move(c));
  // src's handle goes after the command that reads it.
}

std::vector<Primitive> RemoteBackend::send_op(ir::Op op, std::vector<ir::TensorType>& input_types) {
  std::vector<const ir::TensorType*> types(op.inputs.size(), nullptr);
  std::size_t next = 0;
  for (std::size_t k = 0; k < op.inputs.size(); ++k) {
    if (op.inputs[k] != ir::kNoTensor) types[k] = &input_types[next++];
  }
  op.output_types = infer_types(op, types);
  // A dim the values decide (mask_select, argwhere) is -1; it travels as 0 and the server says
  // what it is.
  bool value_shaped = false;
  for (ir::TensorType& type : op.output_types) {
    std::vector<std::int64_t> dims(type.shape.dims().begin(), type.shape.dims().end());
    bool unknown = false;
    for (std::int64_t& dim : dims) {
      if (dim < 0) {
        unknown = true;
        dim = 0;
      }
    }
    if (unknown) type.shape = Shape(std::move(dims));
    value_shaped |= unknown;
  }
  // Every id is taken before a handle is made: a handle frees its id on the server, which would
  // end the session if the op was never sent because a later id was refused (the tensor limit).
  for (std::size_t j = 0; j < op.output_types.size(); ++j) {
    try {
      op.outputs.push_back({channel_->new_id()});
    } catch (...) {
      for (ir::TensorId id : op.outputs) channel_->return_unused(id.index);
      throw;
    }
  }
  std::vector<Primitive> results;
  results.reserve(op.output_types.size());
  for (std::size_t j = 0; j < op.output_types.size(); ++j) {
    // Made before the op is queued: if queueing throws, the handle frees the id again.
    results.push_back(std::make_shared<RemoteTensor>(op.output_types[j], device_, channel_.get(),
                                                     op.outputs[j].index));
  }
  Command c;
  c.kind = CommandKind::Op;
  c.op = std::move(op);
  channel_->enqueue(std::move(c));
  if (!value_shaped) return results;

  // The values decide the shape (mask_select, argwhere): the server says what it is.
  for (Primitive& result : results) {
    auto& tensor = static_cast<RemoteTensor&>(*result);
    tensor.set_shape(ask<ir::TensorType>(*channel_, CommandKind::Describe, tensor.id(), decode_type)
                         .get()
                         .shape);
  }
  return results;
}

template <OpCode code, class Result, class... Args>
Result RemoteBackend::ship(const Args&... args) {
  Inputs inputs(*this, op_info(code).name);
  ir::Op op = ir::Call<code>::make(inputs, args...);
  return results_as<Result>(send_op(std::move(op), inputs.types));
}

// ---- ops written out: data in and out, and moves between devices ----

void RemoteBackend::check_stores_quantized(const char* op) const {
  if (!dtype_usage(DType::QFloat).contains(DTypeUsage::Storage)) {
    detail::fail<UnsupportedDType>(op, name(), " cannot store qfloat tensors");
  }
}

Primitive RemoteBackend::quantize(Primitive x, QuantScheme scheme) {
  check_stores_quantized("quantize");
  return ship<OpCode::quantize, Primitive>(x, scheme);
}

Primitive RemoteBackend::from_data(TensorData data, Device) {
  if (data.dtype() == DType::QFloat) check_stores_quantized("from_data");
  const std::uint32_t id = channel_->new_id();
  auto result = std::make_shared<RemoteTensor>(type_of(data), device_, channel_.get(), id);
  channel_->upload(id, data);
  uploaded_.release(std::move(data).into_bytes());
  return result;
}

ReadFuture RemoteBackend::into_data(Primitive x) {
  return ask<TensorData>(*channel_, CommandKind::Read, remote_tensor(x, "into_data").id(),
                         decode_data);
}

ReadManyFuture RemoteBackend::read_many(PrimitiveList xs) {
  // Every read is queued before the first is waited for: one round trip for all of them.
  std::vector<ReadFuture> reads;
  reads.reserve(xs.size());
  for (Primitive& x : xs) reads.push_back(into_data(std::move(x)));
  return std::async(std::launch::deferred, [reads = std::move(reads)]() mutable {
    std::vector<TensorData> data;
    data.reserve(reads.size());
    for (ReadFuture& read : reads) data.push_back(read.get());
    return data;
  });
}

Primitive RemoteBackend::to_device(Primitive x, Device device) {
  if (device.same_hardware(device_)) return x;
  TensorData data = into_data(std::move(x)).get();
  const Device target = device.without_autodiff().without_fusion();
  return hardware_backend_for(target).from_data(std::move(data), target);
}

// ---- collectives: run here, through the group's communicator (the contract's defaults) ----

Primitive RemoteBackend::all_reduce(Primitive x, ReduceOperation operation, ProcessGroup group) {
  return Backend::all_reduce(std::move(x), operation, std::move(group));
}
Primitive RemoteBackend::broadcast_from(Primitive x, std::int64_t root, ProcessGroup group) {
  return Backend::broadcast_from(std::move(x), root, std::move(group));
}
Primitive RemoteBackend::all_gather(Primitive x, ProcessGroup group) {
  return Backend::all_gather(std::move(x), std::move(group));
}
Primitive RemoteBackend::reduce_scatter(Primitive x, ReduceOperation operation,
                                        ProcessGroup group) {
  return Backend::reduce_scatter(std::move(x), operation, std::move(group));
}
Primitive RemoteBackend::send(Primitive x, std::int64_t destination, ProcessGroup group) {
  return Backend::send(std::move(x), destination, std::move(group));
}
Primitive RemoteBackend::recv(Shape shape, DType dtype, Device device, std::int64_t source,
                              ProcessGroup group) {
  return Backend::recv(std::move(shape), dtype, device, source, std::move(group));
}

// ---- every other op: sent as it is ----

#define KILN_REMOTE_WRITTEN_OUT_from_data KILN_PROBE
#define KILN_REMOTE_WRITTEN_OUT_into_data KILN_PROBE
#define KILN_REMOTE_WRITTEN_OUT_quantize KILN_PROBE
#define KILN_REMOTE_WRITTEN_OUT_read_many KILN_PROBE
#define KILN_REMOTE_WRITTEN_OUT_to_device KILN_PROBE
#define KILN_REMOTE_WRITTEN_OUT_all_reduce KILN_PROBE
#define KILN_REMOTE_WRITTEN_OUT_broadcast_from KILN_PROBE
#define KILN_REMOTE_WRITTEN_OUT_all_gather KILN_PROBE
#define KILN_REMOTE_WRITTEN_OUT_reduce_scatter KILN_PROBE
#define KILN_REMOTE_WRITTEN_OUT_send KILN_PROBE
#define KILN_REMOTE_WRITTEN_OUT_recv KILN_PROBE
#define KILN_REMOTE_NOT_0 1
#define KILN_REMOTE_NOT_1 0
#define KILN_REMOTE_NOT(x) KILN_REMOTE_NOT_EXPANDED(x)
#define KILN_REMOTE_NOT_EXPANDED(x) KILN_REMOTE_NOT_##x
#define KILN_UNPAREN(...) __VA_ARGS__
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  KILN_WHEN(KILN_REMOTE_NOT(KILN_IS_PROBE(KILN_REMOTE_WRITTEN_OUT_##name)))              \
  (result RemoteBackend::name params { return ship<OpCode::name, result>(KILN_UNPAREN args); })
#include "kiln/detail/ops.def"
#undef KILN_OP
#undef KILN_UNPAREN

}  // namespace kiln::remote
