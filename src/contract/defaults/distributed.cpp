// Defaults of the collectives: the values go to the host, through the group's communicator
// (which first checks that the ranks agree on the call), and back to this backend's device.
// f16 and bf16 reduce in f32; a mean is a sum divided by the group's size. all_gather and
// reduce_scatter join and split dim 0, whose chunks are contiguous in row-major order.
#include "contract/defaults/compose.h"
#include "core/checked.h"

namespace kiln {

using namespace defaults;
using distributed::Collective;
using distributed::CollectiveKind;

namespace {

Primitive on_device(Backend& b, TensorData data) {
  return b.from_data(std::move(data), b.device());
}

// The operation the communicator applies: a mean is a sum first.
ReduceOperation combining(ReduceOperation operation) {
  return operation == ReduceOperation::Mean ? ReduceOperation::Sum : operation;
}

Primitive finish_reduction(Backend& b, Primitive sum, ReduceOperation operation, int size,
                           DType dtype) {
  if (operation == ReduceOperation::Mean) sum = b.div_scalar(std::move(sum), size);
  return from_compute(b, std::move(sum), dtype);
}

}  // namespace

Primitive Backend::all_reduce(Primitive x, ReduceOperation operation, ProcessGroup group) {
  if (group.size() == 1) return x;
  const DType dtype = x->dtype();
  const Collective what{CollectiveKind::AllReduce, dtype, x->shape(), operation};
  TensorData data = into_data(to_compute(*this, std::move(x))).get();
  group.communicator().all_reduce(what, data.bytes(), data.dtype(), combining(operation));
  return finish_reduction(*this, on_device(*this, std::move(data)), operation, group.size(), dtype);
}

Primitive Backend::broadcast_from(Primitive x, std::int64_t root, ProcessGroup group) {
  if (group.size() == 1) return x;
  const Collective what{CollectiveKind::Broadcast, x->dtype(), x->shape(), {}, root};
  TensorData data = into_data(std::move(x)).get();
  group.communicator().broadcast(what, data.bytes(), static_cast<int>(root));
  return on_device(*this, std::move(data));
}

Primitive Backend::all_gather(Primitive x, ProcessGroup group) {
  if (group.size() == 1) return x;
  const Shape shape = x->shape();
  const Collective what{CollectiveKind::AllGather, x->dtype(), shape};
  TensorData data = into_data(std::move(x)).get();
  // Every rank's values in rank order: the tensors joined along dim 0.
  const Shape joined = with_dim(shape, 0, shape[0] * group.size());
  TensorData out(std::vector<std::byte>(checked::dense_bytes(joined, data.dtype(), "all_gather")),
                 joined, data.dtype());
  group.communicator().all_gather(what, data.bytes(), out.bytes());
  return on_device(*this, std::move(out));
}

Primitive Backend::reduce_scatter(Primitive x, ReduceOperation operation, ProcessGroup group) {
  if (group.size() == 1) return x;
  const DType dtype = x->dtype();
  const Collective what{CollectiveKind::ReduceScatter, dtype, x->shape(), operation};
  const Shape chunk = with_dim(x->shape(), 0, x->shape()[0] / group.size());
  TensorData data = into_data(to_compute(*this, std::move(x))).get();
  TensorData out(
      std::vector<std::byte>(checked::dense_bytes(chunk, data.dtype(), "reduce_scatter")), chunk,
      data.dtype());
  group.communicator().reduce_scatter(what, data.bytes(), out.bytes(), data.dtype(),
                                      combining(operation));
  return finish_reduction(*this, on_device(*this, std::move(out)), operation, group.size(), dtype);
}

Primitive Backend::send(Primitive x, std::int64_t destination, ProcessGroup group) {
  const Collective what{CollectiveKind::Send, x->dtype(), x->shape(), {}, destination};
  const TensorData data = into_data(x).get();
  group.communicator().send(what, data.bytes(), static_cast<int>(destination));
  return x;
}

Primitive Backend::recv(Shape shape, DType dtype, Device device, std::int64_t source,
                        ProcessGroup group) {
  const Collective what{CollectiveKind::Recv, dtype, shape, {}, source};
  TensorData data(std::vector<std::byte>(checked::dense_bytes(shape, dtype, "recv")), shape, dtype);
  group.communicator().recv(what, data.bytes(), static_cast<int>(source));
  return from_data(std::move(data), device);
}

}  // namespace kiln
