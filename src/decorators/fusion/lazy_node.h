// The fusion decorator's record of a value: computed (it holds the inner backend's tensor and is a
// leaf of later groups) or pending (an op of ops.def with its inputs, run when a value is needed).
// FusionTensor shows a node to users; the count of those handles tells which pending nodes a
// group must write out (held) and which stay in registers or cache (nobody holds them).
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
  // Computed: the inner backend's tensor.
  Primitive value;
  // FusionTensors showing this node.
  std::atomic<std::int32_t> handles{0};

  bool computed() const noexcept { return value != nullptr; }
  // The shape this node's op iterates over: its input's for an op along a dim (a reduction
  // iterates over what it reduces), else its own.
  const Shape& space() const noexcept { return params.dim >= 0 ? inputs[0]->shape : shape; }
};

using NodeRef = std::shared_ptr<LazyNode>;

class FusionTensor final : public TensorPrimitive {
 public:
  FusionTensor(NodeRef node, Device device)
      : TensorPrimitive(node->dtype, node->shape, device), node_(std::move(node)) {
    node_->handles.fetch_add(1, std::memory_order_relaxed);
  }
  ~FusionTensor() override { node_->handles.fetch_sub(1, std::memory_order_relaxed); }

  // The decorator hands inner tensors to the inner backend as shared handles, never for reuse.
  bool storage_unique() const noexcept override { return false; }
  const NodeRef& node() const noexcept { return node_; }

 private:
  NodeRef node_;
};

}  // namespace kiln::fusion
