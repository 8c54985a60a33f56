// AutodiffBackend::record's work, once per input count: run the op on the inner backend and, when
// an input is tracked, fill the node the op's rule made (parents, saved values, output) or keep
// its forward to recompute the output under balanced checkpointing.
#include <algorithm>

#include "decorators/autodiff/autodiff_backend.h"

namespace kiln::autodiff {

template <std::size_t N>
Primitive AutodiffBackend::record_node(
    Cost cost, Inputs<N>& inputs, Keep keep,
    detail::FunctionRef<Primitive(Backend&, Inputs<N>)> forward,
    detail::FunctionRef<std::shared_ptr<InputsNode<N>>(std::uint64_t, std::size_t, bool)> make_node,
    Primitive precomputed) {
  const std::size_t count = inputs.size();
  const Node* newest = nullptr;
  for (std::size_t i = 0; i < count; ++i) {
    const Node* parent = node_of(inputs[i]).get();
    if (parent != nullptr && (newest == nullptr || parent->order() > newest->order()))
      newest = parent;
  }
  Inputs<N> inner_inputs{};
  if constexpr (N == 0) inner_inputs.resize(count);
  InputArray<N, Lent> lent{};
  if constexpr (N == 0) lent.resize(count);
  // Lends input i to the inner op (see lend_inner), remembering the wrapper for reown.
  auto lend = [&](std::size_t i) { inner_inputs[i] = lend_inner(std::move(inputs[i]), lent[i]); };
  auto run_forward = [&] {
    Primitive out = forward(inner(), std::move(inner_inputs));
    for (const Lent& l : lent) out = reown(std::move(out), l);
    return out;
  };
  if (newest == nullptr) {
    if (precomputed) return wrap(std::move(precomputed));
    for (std::size_t i = 0; i < count; ++i) lend(i);
    return wrap(run_forward());
  }
  bool recompute =
      checkpointing() == CheckpointStrategy::Balanced && cost == Cost::Elementwise && !precomputed;
  std::uint8_t depth = 0;
  if (recompute) {
    for (std::size_t i = 0; i < count; ++i) {
      const Node* parent = node_of(inputs[i]).get();
      if (parent != nullptr && parent->recomputable())
        depth = std::max(depth, parent->recompute_depth());
    }
    // Every kMaxRecomputeChain-th op of an elementwise chain is stored after all: backward then
    // recomputes (and holds) at most that many values at once, and recursion stays shallow.
    if (++depth > kMaxRecomputeChain) recompute = false;
  }
  std::shared_ptr<InputsNode<N>> node = make_node(newest->order(), count, recompute);
  auto& parents = node->parent_slots();
  auto& saved = node->saved_slots();
  for (std::size_t i = 0; i < count; ++i) {
    parents[i] = node_of(inputs[i]);
    const bool keep_input = recompute || (keep & (1u << std::min<std::size_t>(i, 29))) != 0;
    if (keep_input) {
      // An input that is itself recomputed is saved as its producer, not as a value.
      const bool lazy = parents[i] != nullptr && parents[i]->recomputable();
      saved[i] = Saved{lazy ? nullptr : inner_of(inputs[i]), parents[i]};
      inner_inputs[i] = inner_of(inputs[i]);
    } else {
      lend(i);
    }
  }
  Primitive out = precomputed ? std::move(precomputed) : run_forward();
  if ((keep & kKeepOut) != 0 && !recompute) node->set_output(out);
  if (recompute) node->set_recompute_depth(depth);
  return wrap(std::move(out), std::move(node));
}

// The input counts the rules use (a rule of another count fails to link, naming it).
#define KILN_RECORD_NODE(N)                                                                  \
  template Primitive AutodiffBackend::record_node<N>(                                        \
      Cost, Inputs<N>&, Keep, detail::FunctionRef<Primitive(Backend&, Inputs<N>)>,           \
      detail::FunctionRef<std::shared_ptr<InputsNode<N>>(std::uint64_t, std::size_t, bool)>, \
      Primitive);
KILN_RECORD_NODE(0)
KILN_RECORD_NODE(1)
KILN_RECORD_NODE(2)
KILN_RECORD_NODE(3)
KILN_RECORD_NODE(4)
KILN_RECORD_NODE(5)
#undef KILN_RECORD_NODE

}  // namespace kiln::autodiff
