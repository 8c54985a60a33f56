// Collectives: tensors combined across the ranks of a ProcessGroup (kiln/process_group.h).
// Every rank calls the same collective, in the same order, with a tensor of the same dtype and
// shape; each returns a new tensor on the input's device.
//
//   ProcessGroup group = ProcessGroup::from_env();          // under `kiln launch --nproc 2`
//   auto x = Tensor<1>::full({4}, group.rank() + 1.0, dev);
//   distributed::all_reduce(x, group);                      // [3, 3, 3, 3] on both ranks
//   distributed::all_reduce(x, group, ReduceOperation::Max);// [2, 2, 2, 2]
//   distributed::broadcast(x, group, 0);                    // rank 0's x everywhere
//   distributed::all_gather(x, group);                      // shape [8]: rank 0's, then rank 1's
//   distributed::reduce_scatter(Tensor<1>::ones({8}, dev), group);  // shape [4] of 2s
//   if (group.rank() == 0) distributed::send(x, group, 1);
//   else auto y = distributed::recv<1>({4}, group, 0);      // rank 0's x
//
// Reductions (Sum, Mean, Max, Min) take float and integer tensors; f16 and bf16 reduce in f32
// and round once; an integer mean is rounded down (div_scalar). broadcast, all_gather, send and
// recv move any dtype, bool included. all_gather joins dim 0 in rank order and reduce_scatter
// gives rank r chunk r of dim 0 (its size must divide by the group's). Quantized tensors take no
// part (dequantize first). Collectives are not differentiable: a tracked input is an
// AutodiffError (detach it; data-parallel training reduces gradients, which are untracked).
// Mismatched calls and unresponsive ranks throw DistributedError (kiln/process_group.h).
#pragma once

#include <optional>

#include "kiln/process_group.h"
#include "kiln/tensor.h"

namespace kiln::distributed {

// Whether groups of several ranks can be made: kiln was built with Gloo (KILN_HAVE_GLOO).
bool available() noexcept;

namespace detail {

// The checked calls behind the templates below (src/distributed/collectives.cpp).
Primitive all_reduce(const Primitive& x, const ProcessGroup& group, ReduceOperation operation);
Primitive broadcast(const Primitive& x, const ProcessGroup& group, std::int64_t root);
Primitive all_gather(const Primitive& x, const ProcessGroup& group);
Primitive reduce_scatter(const Primitive& x, const ProcessGroup& group, ReduceOperation operation);
void send(const Primitive& x, const ProcessGroup& group, std::int64_t destination);
Primitive recv(const Shape& shape, std::size_t rank, Kind kind, const ProcessGroup& group,
               std::int64_t source, std::optional<DType> dtype, std::optional<Device> device);

}  // namespace detail

// Every rank's x combined element by element; the same result on every rank.
template <std::size_t D, NumericKind K>
Tensor<D, K> all_reduce(const Tensor<D, K>& x, const ProcessGroup& group,
                        ReduceOperation operation = ReduceOperation::Sum) {
  return Tensor<D, K>::from_primitive(detail::all_reduce(x.primitive(), group, operation));
}

// root's x on every rank (the others' x give only the shape and dtype, which must match).
template <std::size_t D, TensorKind K>
Tensor<D, K> broadcast(const Tensor<D, K>& x, const ProcessGroup& group, std::int64_t root = 0) {
  return Tensor<D, K>::from_primitive(detail::broadcast(x.primitive(), group, root));
}

// The ranks' x joined along dim 0 in rank order: dim 0 becomes size() times longer.
template <std::size_t D, TensorKind K>
Tensor<D, K> all_gather(const Tensor<D, K>& x, const ProcessGroup& group) {
  return Tensor<D, K>::from_primitive(detail::all_gather(x.primitive(), group));
}

// Dim 0 of x split into size() chunks; rank r gets chunk r combined over the ranks.
template <std::size_t D, NumericKind K>
Tensor<D, K> reduce_scatter(const Tensor<D, K>& x, const ProcessGroup& group,
                            ReduceOperation operation = ReduceOperation::Sum) {
  return Tensor<D, K>::from_primitive(detail::reduce_scatter(x.primitive(), group, operation));
}

// x to rank destination, which calls recv with x's shape and dtype; returns when x is sent.
template <std::size_t D, TensorKind K>
void send(const Tensor<D, K>& x, const ProcessGroup& group, std::int64_t destination) {
  detail::send(x.primitive(), group, destination);
}

// The tensor rank source sends, of shape and dtype (default: the device's for kind K), on
// device (default: the group's).
template <std::size_t D, TensorKind K = Float>
Tensor<D, K> recv(const Shape& shape, const ProcessGroup& group, std::int64_t source,
                  std::optional<DType> dtype = std::nullopt,
                  std::optional<Device> device = std::nullopt) {
  return Tensor<D, K>::from_primitive(
      detail::recv(shape, D, K::kind, group, source, dtype, device));
}

}  // namespace kiln::distributed
