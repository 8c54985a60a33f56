// The fusion decorator's record of a value: computed (it holds the inner backend's tensor and is a
// leaf of later groups) or pending (an op of ops.def with its inputs, run when a value is needed).
// FusionTensor shows a value to users; the count of the handles showing a pending node tells
// which pending nodes a group must write out (held) and which stay in registers or cache (nobody
// holds them).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>

#include "contract/fused_program.h"
#include "kiln/primitive.h"

namespace kiln::fusion {

struct LazyNode {
  DType dtype = DType::F32;
  Shape shape;
  // Pending: the op, its parameters (a dim >= 0: it works along that dim), inputs, and how to
  // run it.
  OpCode op{};
  StepParams params;
  std::uint8_t arity = 0;
  std::array<std::shared_ptr<LazyNode>, 3> inputs;
  StepRun run = nullptr;
  // Ops that computing this node would run (an upper bound: shared inputs count twice); a new
  // op over inputs with too many computes them first, which bounds every group.
  std::uint32_t pending_ops = 0;
  // Computed: the inner backend's tensor. Written once, under the decorator's lock, before done.
  Primitive value;
  // Which gather last took this node (the decorator's count of gathers) and as which step: finding
  // a node shared by two steps of a group costs a compare, not a search. Under the lock.
  std::uint64_t gathered = 0;
  std::int32_t step = -1;
  // Set (release) once value is written: a reader that sees it may read value without the lock.
  std::atomic<bool> done{false};
  // FusionTensors showing this node while it is pending.
  std::atomic<std::int32_t> handles{0};

  bool computed() const noexcept { return value != nullptr; }
  // The shape this node's op iterates over: its input's for an op along a dim (a reduction
  // iterates over what it reduces), else its own.
  const Shape& space() const noexcept { return params.dim >= 0 ? inputs[0]->shape : shape; }
};

using NodeRef = std::shared_ptr<LazyNode>;

// A fused device's tensor. Made pending (a node that runs when needed) or computed (the inner
// backend's tensor, fixed for its life: an op that ran at once, a constant). A computed one has
// no node until a recorded op reads it: most results of ops that run at once are only read by
// other such ops, so the node and its allocation would be wasted.
class FusionTensor final : public TensorPrimitive {
 public:
  FusionTensor(NodeRef node, Device device)
      : TensorPrimitive(node->dtype, node->shape, device), node_(std::move(node)) {
    node_->handles.fetch_add(1, std::memory_order_relaxed);
  }
  FusionTensor(Primitive value, Device device)
      : TensorPrimitive(value->dtype(), value->shape(), device), value_(std::move(value)) {}
  ~FusionTensor() override {
    if (!value_) node_->handles.fetch_sub(1, std::memory_order_relaxed);
  }

  // The decorator hands inner tensors to the inner backend as shared handles, never for reuse.
  bool storage_unique() const noexcept override { return false; }
  const QuantScheme* quant_scheme() const noexcept override {
    const Primitive* inner = known_value();
    return inner != nullptr ? (*inner)->quant_scheme() : nullptr;
  }
  // The inner tensor, when this handle was made computed; null when it was made pending.
  const Primitive& value() const noexcept { return value_; }
  // The inner tensor when it is known without the decorator's lock: made computed, or pending
  // and run since. Null otherwise.
  const Primitive* known_value() const noexcept {
    if (value_) return &value_;
    return node_->done.load(std::memory_order_acquire) ? &node_->value : nullptr;
  }
  // The node: pending (made so), or computed (made on first use as an input of a recorded op).
  // Read and made under the decorator's lock only.
  NodeRef& node() const noexcept { return node_; }

 private:
  mutable NodeRef node_;
  const Primitive value_;
};

}  // namespace kiln::fusion
