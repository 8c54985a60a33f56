// The collectives of cuda tensors (ops.def's distributed group) over NCCL between the ranks'
// GPUs (nccl_transport.h). The host path of Backend's defaults where the group cannot use NCCL on
// this GPU (no NCCL, two ranks on one GPU: nccl_transport.h), where NCCL has no reduction for the
// dtype (i16, u16), and for send and recv before the group has set NCCL up (its first collective
// on this GPU). Inputs are made contiguous; each result is a new tensor on this GPU. A float mean
// is NCCL's average; an integer mean a sum divided afterwards (rounded down, as on the host
// path).
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/nccl_transport.h"
#include "core/checked.h"

namespace kiln::cuda {
namespace {

using distributed::Collective;
using distributed::CollectiveKind;

// The group's NCCL transport on this GPU (set up at the first call), or null for the host path.
std::shared_ptr<NcclTransport> transport(Runtime& runtime, const ProcessGroup& group, bool set_up) {
#ifdef KILN_HAVE_NCCL
  return set_up ? nccl_transport(runtime, group) : made_nccl_transport(runtime, group);
#else
  (void)runtime, (void)group, (void)set_up;
  return nullptr;
#endif
}

std::size_t bytes_of(const CudaTensor& t) {
  return static_cast<std::size_t>(t.shape().num_elements()) * dtype_size(t.dtype());
}

// What NCCL reduces with: a mean of integers is a sum first.
ReduceOperation combining(ReduceOperation operation, DType dtype) {
  return operation == ReduceOperation::Mean && !is_float(dtype) ? ReduceOperation::Sum : operation;
}

}  // namespace

Primitive CudaBackend::all_reduce(Primitive x, ReduceOperation operation, ProcessGroup group) {
  const DType dtype = x->dtype();
  const auto nccl = NcclTransport::reduces(dtype) ? transport(runtime_, group, true) : nullptr;
  if (!nccl) return Backend::all_reduce(std::move(x), operation, std::move(group));
  const Shape shape = x->shape();
  const TensorPtr in = contiguous(x, "all_reduce");
  TensorPtr out = make_tensor(dtype, shape, "all_reduce");
  nccl->all_reduce(group, Collective{CollectiveKind::AllReduce, dtype, shape, operation},
                   in->data(), out->data(), shape.num_elements(), combining(operation, dtype));
  if (combining(operation, dtype) == operation) return out;
  return div_scalar(std::move(out), group.size());
}

Primitive CudaBackend::broadcast_from(Primitive x, std::int64_t root, ProcessGroup group) {
  const auto nccl = transport(runtime_, group, true);
  if (!nccl) return Backend::broadcast_from(std::move(x), root, std::move(group));
  const Collective what{CollectiveKind::Broadcast, x->dtype(), x->shape(), {}, root};
  const TensorPtr in = contiguous(x, "broadcast");
  TensorPtr out = make_tensor(x->dtype(), x->shape(), "broadcast");
  nccl->broadcast(group, what, in->data(), out->data(), bytes_of(*in));
  return out;
}

Primitive CudaBackend::all_gather(Primitive x, ProcessGroup group) {
  const auto nccl = transport(runtime_, group, true);
  if (!nccl) return Backend::all_gather(std::move(x), std::move(group));
  const Collective what{CollectiveKind::AllGather, x->dtype(), x->shape()};
  const TensorPtr in = contiguous(x, "all_gather");
  Shape joined = x->shape();
  joined[0] = checked::mul(joined[0], group.size(), "all_gather", "dim 0 times the group's size");
  TensorPtr out = make_tensor(x->dtype(), joined, "all_gather");
  nccl->all_gather(group, what, in->data(), out->data(), bytes_of(*in));
  return out;
}

Primitive CudaBackend::reduce_scatter(Primitive x, ReduceOperation operation, ProcessGroup group) {
  const DType dtype = x->dtype();
  const auto nccl = NcclTransport::reduces(dtype) ? transport(runtime_, group, true) : nullptr;
  if (!nccl) return Backend::reduce_scatter(std::move(x), operation, std::move(group));
  const Collective what{CollectiveKind::ReduceScatter, dtype, x->shape(), operation};
  const TensorPtr in = contiguous(x, "reduce_scatter");
  Shape chunk = x->shape();
  chunk[0] /= group.size();
  TensorPtr out = make_tensor(dtype, chunk, "reduce_scatter");
  nccl->reduce_scatter(group, what, in->data(), out->data(), chunk.num_elements(),
                       combining(operation, dtype));
  if (combining(operation, dtype) == operation) return out;
  return div_scalar(std::move(out), group.size());
}

Primitive CudaBackend::send(Primitive x, std::int64_t destination, ProcessGroup group) {
  const auto nccl = transport(runtime_, group, false);
  if (!nccl) return Backend::send(std::move(x), destination, std::move(group));
  const TensorPtr in = contiguous(x, "send");
  nccl->send(group, Collective{CollectiveKind::Send, x->dtype(), x->shape(), {}, destination},
             in->data(), bytes_of(*in), static_cast<int>(destination));
  return x;
}

Primitive CudaBackend::recv(Shape shape, DType dtype, Device device, std::int64_t source,
                            ProcessGroup group) {
  const auto nccl = transport(runtime_, group, false);
  if (!nccl) return Backend::recv(std::move(shape), dtype, device, source, std::move(group));
  TensorPtr out = make_tensor(dtype, shape, "recv");
  nccl->recv(group, Collective{CollectiveKind::Recv, dtype, shape, {}, source}, out->data(),
             bytes_of(*out), static_cast<int>(source));
  return out;
}

}  // namespace kiln::cuda
