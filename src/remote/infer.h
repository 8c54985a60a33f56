// The result types of every op of ops.def, computed from its inputs' types and its attributes,
// with the checks the tensor layer makes before it calls a backend. The remote client uses it to
// know each result's dtype and shape without asking the server; the server, to refuse an op from
// the network that a backend would not survive (a backend trusts the tensor layer: dims in range,
// shapes that broadcast, one dtype for binary operands, complete conv and pool options, ...).
//
//   ir::Op op = ...;  // e.g. sum_dim(%0, dim=1) with %0 an f32 [64, 300]
//   const ir::TensorType x{DType::F32, Shape{64, 300}};
//   const ir::TensorType* inputs[] = {&x};
//   std::vector<ir::TensorType> out = remote::infer_types(op, inputs);  // f32 [64, 1]
//
// An op is checked as the backend receives it, after the tensor layer's work: dims already
// non-negative, operands already promoted to one dtype, reshape's -1 already resolved, slices
// already resolved against the shape, option vectors already complete (one entry per spatial
// dim). Anything else is refused. A QFloat input (its type with its scheme and axes) is taken
// only where the tensor layer hands one over as it is (matmul's and linear's weight, embedding's
// table, the views, dequantize, reads and moves); a QFloat result's type names its blocks.
#pragma once

#include "ir/op_ir.h"

namespace kiln::remote {

// The types of op's results (one per output; empty for a read op such as into_data/read_many),
// given the types of its tensor inputs in op.inputs order (nullptr where op.inputs[k] is
// ir::kNoTensor, an absent optional tensor). Checks everything the tensor layer checks before
// it calls a backend, and what a backend assumes: throws the same kiln::Error subclasses the
// tensor layer would (ShapeMismatch, DTypeMismatch, InvalidArgument, ...), message starting
// "[opname] " and naming the values that were wrong. Never crashes or overflows on hostile
// values (huge dims, negative sizes, int64 extremes: compute sizes with overflow checks).
// For an op whose result shape depends on the values (impl letter V in ops.def: mask_select,
// argwhere), the value-dependent dims are -1 in the returned shape.
std::vector<ir::TensorType> infer_types(const ir::Op& op,
                                        std::span<const ir::TensorType* const> inputs);

// data's type (a QFloat one's scheme, in stored order).
ir::TensorType type_of(const TensorData& data);
// The shape a QFloat type's blocks are stored in: its shape with its axes undone.
Shape stored_shape(const ir::TensorType& type);
// What makes a QFloat type impossible (axes that are not a permutation of its dims, a scheme
// kiln does not know or that its stored shape cannot hold), as a message; empty when nothing
// does or the type is not QFloat.
std::string quant_problem(const ir::TensorType& type);

}  // namespace kiln::remote
