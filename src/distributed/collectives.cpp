// The tensor layer of the collectives (kiln/distributed.h): arguments checked on this rank, then
// the op of the contract on the tensor's backend chain.
#include "core/checked.h"
#include "kiln/distributed.h"
#include "tensor/common.h"

namespace kiln::distributed::detail {
namespace {

using kiln::detail::backend_of;
using kiln::detail::fail;

void check_group(const ProcessGroup& group, const char* op) {
  if (group.size() < 1) fail<InvalidArgument>(op, "the group has no ranks");
}

// Checked before anything moves: autodiff's own check comes after the op has run, and a
// collective that ran on one rank only leaves the others waiting.
void check_untracked(const Primitive& x, const char* op) {
  if (kiln::detail::is_require_grad(x)) {
    fail<AutodiffError>(op,
                        "has no backward rule, so its input cannot be tracked: collectives "
                        "are not differentiable; detach() it first");
  }
}

void check_dtype(DType dtype, bool reduces, const char* op) {
  if (dtype == DType::QFloat) {
    fail<UnsupportedDType>(op, "quantized tensors take no part in collectives: dequantize() first");
  }
  if (reduces && dtype == DType::Bool) {
    fail<DTypeMismatch>(op,
                        "expected a float or int tensor, got bool (bool values are moved, "
                        "not reduced)");
  }
}

void check_operation(ReduceOperation operation, const char* op) {
  if (static_cast<int>(operation) > static_cast<int>(ReduceOperation::Min)) {
    fail<InvalidArgument>(op, "unknown reduce operation ", static_cast<int>(operation));
  }
}

// A rank of group other than this one: InvalidArgument naming what it is for.
void check_peer(const ProcessGroup& group, std::int64_t peer, const char* what, const char* op) {
  if (peer < 0 || peer >= group.size()) {
    fail<InvalidArgument>(op, what, " ", peer, " is not a rank of a group of ", group.size());
  }
  if (peer == group.rank()) {
    fail<InvalidArgument>(op, what, " ", peer, " is this rank: a rank cannot send to itself");
  }
}

}  // namespace

Primitive all_reduce(const Primitive& x, const ProcessGroup& group, ReduceOperation operation) {
  check_group(group, "all_reduce");
  check_untracked(x, "all_reduce");
  check_dtype(x->dtype(), true, "all_reduce");
  check_operation(operation, "all_reduce");
  return backend_of(x).all_reduce(x, operation, group);
}

Primitive broadcast(const Primitive& x, const ProcessGroup& group, std::int64_t root) {
  check_group(group, "broadcast");
  check_untracked(x, "broadcast");
  check_dtype(x->dtype(), false, "broadcast");
  if (root < 0 || root >= group.size()) {
    fail<InvalidArgument>("broadcast", "root ", root, " is not a rank of a group of ",
                          group.size());
  }
  return backend_of(x).broadcast_from(x, root, group);
}

Primitive all_gather(const Primitive& x, const ProcessGroup& group) {
  check_group(group, "all_gather");
  check_untracked(x, "all_gather");
  check_dtype(x->dtype(), false, "all_gather");
  (void)checked::mul(x->shape()[0], group.size(), "all_gather", "dim 0 times the group's size");
  return backend_of(x).all_gather(x, group);
}

Primitive reduce_scatter(const Primitive& x, const ProcessGroup& group, ReduceOperation operation) {
  check_group(group, "reduce_scatter");
  check_untracked(x, "reduce_scatter");
  check_dtype(x->dtype(), true, "reduce_scatter");
  check_operation(operation, "reduce_scatter");
  if (x->shape()[0] % group.size() != 0) {
    fail<ShapeMismatch>("reduce_scatter", "dim 0 of ", x->shape().to_string(),
                        " does not split into ", group.size(), " equal chunks, one per rank");
  }
  return backend_of(x).reduce_scatter(x, operation, group);
}

void send(const Primitive& x, const ProcessGroup& group, std::int64_t destination) {
  check_group(group, "send");
  check_untracked(x, "send");
  check_dtype(x->dtype(), false, "send");
  check_peer(group, destination, "destination", "send");
  (void)backend_of(x).send(x, destination, group);
}

Primitive recv(const Shape& shape, std::size_t rank, Kind kind, const ProcessGroup& group,
               std::int64_t source, std::optional<DType> dtype, std::optional<Device> device) {
  check_group(group, "recv");
  check_peer(group, source, "source", "recv");
  if (shape.rank() != rank) {
    fail<ShapeMismatch>("recv", "a Tensor of rank ", rank, " cannot hold a shape of rank ",
                        shape.rank(), " (", shape.to_string(), ")");
  }
  checked::check_shape(shape, "recv");
  const Device on = device.value_or(group.device());
  const DType type = dtype.value_or(kiln::detail::default_dtype(on, kind));
  check_dtype(type, false, "recv");
  if (kiln::detail::kind_of(type) != kind) {
    fail<DTypeMismatch>("recv", "a ", dtype_name(type), " tensor is not of the requested kind");
  }
  return backend_for(on).recv(shape, type, on, source, group);
}

}  // namespace kiln::distributed::detail
