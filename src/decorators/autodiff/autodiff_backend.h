// The autodiff decorator: `dev.autodiff()` runs ops here. Each op runs on the inner backend; when
// an input is tracked, the op also records a graph node holding its backward rule. Rules are
// written in ops (on a Backend&), so they run on any backend and, under create_graph, on this
// decorator itself, which makes gradients differentiable again.
//
// AutodiffPassthrough handles every op of ops.def without a rule: inputs are unwrapped, the inner
// backend runs the op, and the result is untracked. That is right for ops whose results carry no
// gradient (comparisons, argmax, integer and bool ops, creation); a float result computed from a
// tracked input without a rule is refused rather than silently cut from the graph.
// AutodiffBackend overrides the differentiable ops (impl D in ops.def); their rules live in
// rules_<family>.cpp.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>

#include "contract/backend.h"
#include "contract/defaults/compose.h"
#include "contract/forwarding.h"
#include "core/function_ref.h"
#include "core/visibility.h"
#include "decorators/autodiff/autodiff_tensor.h"
#include "decorators/autodiff/op_node.h"
#include "kiln/autodiff.h"
#include "kiln/detail/op_columns.h"

namespace kiln::autodiff {

// The decorator's base: what is not an op (settings, sync, memory) forwards to the inner backend
// as in every decorator (ForwardingBackend); every op is overridden here or in AutodiffBackend.
class KILN_INTERNAL AutodiffPassthrough : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;

  std::string name() const override { return "autodiff<" + inner().name() + ">"; }
  Device device() const override { return inner().device().autodiff(); }
  bool autodiff_enabled() const override { return true; }
  // Writes the values alone: dst's graph node, if any, stays (optimizers write leaves).
  void assign(const Primitive& dst, Primitive src) override {
    inner().assign(inner_of(dst), take_inner(std::move(src)));
  }

#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  result name params override;
#include "kiln/detail/ops.def"
#undef KILN_OP
};

// How an op's output relates to memory traffic: elementwise outputs are cheap to recompute and
// are not stored under balanced checkpointing; everything else keeps what its rule needs.
enum class Cost : std::uint8_t { Elementwise, Stored };

// Which values a rule reads: bit i for input i, kKeepOut for the output.
using Keep = std::uint32_t;
inline constexpr Keep kKeepNone = 0;
inline constexpr Keep kKeepIn0 = 1u << 0;
inline constexpr Keep kKeepIn1 = 1u << 1;
inline constexpr Keep kKeepIn2 = 1u << 2;
inline constexpr Keep kKeepIn3 = 1u << 3;
inline constexpr Keep kKeepIn4 = 1u << 4;
inline constexpr Keep kKeepAllIn = (1u << 30) - 1;
inline constexpr Keep kKeepOut = 1u << 31;

template <std::size_t N>
using Inputs = InputArray<N, Primitive>;

// The longest run of elementwise ops that balanced checkpointing recomputes in one go.
inline constexpr std::uint8_t kMaxRecomputeChain = 8;

class KILN_INTERNAL AutodiffBackend final : public AutodiffPassthrough {
 public:
  using AutodiffPassthrough::AutodiffPassthrough;

  // Runs forward(inner backend, inner inputs) and, when an input is tracked, records a node whose
  // rule(BackwardArgs&, output gradient) returns one gradient per input (null for none).
  // `precomputed` supplies the output when the caller already has it (ops with two outputs).
  template <std::size_t N, class Forward, class Rule>
  Primitive record(const char* op, Cost cost, Inputs<N> inputs, Keep keep, Forward forward,
                   Rule rule, Primitive precomputed = nullptr) {
    // Only the node's type is the op's own; the rest is record_node, compiled once per N.
    using OpNodeType = OpNode<N, Forward, Rule>;
    auto make_node = [&](std::uint64_t newest_parent, std::size_t count,
                         bool recompute) -> std::shared_ptr<InputsNode<N>> {
      auto node = std::allocate_shared<OpNodeType>(PoolAllocator<OpNodeType>{}, op, newest_parent,
                                                   count, std::move(rule));
      if (recompute) node->set_forward(forward);
      return node;
    };
    return record_node<N>(cost, inputs, keep, forward, make_node, std::move(precomputed));
  }

  // ---- the ops with backward rules: impl D in ops.def (rules_<family>.cpp) ----
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  KILN_WHEN(KILN_IMPL_GRAD(impl))(result name params override;)
#include "kiln/detail/ops.def"
#undef KILN_OP

 private:
  // record's work (record.cpp): make_node(newest parent's order, input count, whether forward
  // is kept to recompute the output) makes the op's node when an input is tracked.
  template <std::size_t N>
  Primitive record_node(
      Cost cost, Inputs<N>& inputs, Keep keep,
      detail::FunctionRef<Primitive(Backend&, Inputs<N>)> forward,
      detail::FunctionRef<std::shared_ptr<InputsNode<N>>(std::uint64_t, std::size_t, bool)>
          make_node,
      Primitive precomputed);
};

// The gradient of a broadcast operand: g summed over the dims where shape has size 1.
using defaults::reduce_to;

}  // namespace kiln::autodiff
