// OpNode: the node of one recorded op. It keeps the values its rule asked for, the rule, and,
// under balanced checkpointing, the op's forward function so its output can be recomputed
// instead of stored. N is the number of inputs (0: a run-time list, as for cat).
#pragma once

#include <array>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "decorators/autodiff/node.h"
#include "runtime/registry.h"

namespace kiln::autodiff {

template <std::size_t N, class T>
using InputArray = std::conditional_t<N == 0, std::vector<T>, std::array<T, N>>;

// What a backward rule sees: the context's backend and the values its node saved.
class BackwardArgs {
 public:
  BackwardArgs(Backend& backend, Context& context, const NodeRef& node,
               std::span<const Saved> saved, const Primitive& output) noexcept
      : b(backend), context_(context), node_(node), saved_(saved), output_(output) {}

  Backend& b;  // where the rule's ops run (the inner backend, or autodiff under create_graph)

  // Saved input i (the op must have kept it).
  Primitive in(std::size_t i) const;
  // The op's output (kept or recomputed).
  Primitive out() const { return context_.output(node_, output_); }
  // Whether the backward pass is itself recorded (create_graph): b is then the autodiff backend.
  bool create_graph() const noexcept { return context_.create_graph(); }
  // Whether input i is tracked, i.e. wants a gradient.
  bool needs(std::size_t i) const noexcept {
    const auto parents = node_->parents();
    return i < parents.size() && parents[i] != nullptr;
  }
  // A primitive of the rule's own making (an index tensor, a mask) in the context's form.
  Primitive constant(Primitive inner) const { return context_.form(std::move(inner), nullptr); }

 private:
  Context& context_;
  const NodeRef& node_;
  std::span<const Saved> saved_;
  const Primitive& output_;
};

// What a node of N inputs holds whatever its rule: the parents, the saved values, the output.
// Made once per N (not per rule), so the teardown code exists a few times, not once per op.
template <std::size_t N>
class InputsNode : public Node {
 public:
  using Parents = InputArray<N, NodeRef>;
  using SavedValues = InputArray<N, Saved>;

  InputsNode(const char* op, std::uint64_t newest_parent, std::size_t inputs)
      : Node(op, newest_parent) {
    if constexpr (N == 0) {
      parents_.resize(inputs);
      saved_.resize(inputs);
    }
  }

  ~InputsNode() override {
    // Saved values may hold parents too: they go first, so drop_parents sees which parents this
    // node alone still holds and tears those down without recursion.
    clear_saved();
    drop_parents(parents_);
  }

  Parents& parent_slots() noexcept { return parents_; }
  SavedValues& saved_slots() noexcept { return saved_; }
  void set_output(Primitive output) noexcept { output_ = std::move(output); }

  std::span<const NodeRef> parents() const noexcept override { return parents_; }

 protected:
  void take_parents(std::vector<NodeRef>& out) noexcept override {
    for (NodeRef& p : parents_) {
      if (p) out.push_back(std::move(p));
    }
  }

  // Node::release and the values held here; the rule's node drops its functions.
  void release_inputs() noexcept {
    Node::release();
    clear_saved();
    output_.reset();
  }

  void clear_saved() noexcept {
    for (Saved& s : saved_) {
      s.value.reset();
      s.node.reset();
    }
  }

  Parents parents_;
  SavedValues saved_;
  Primitive output_;
};

template <std::size_t N, class Forward, class Rule>
class OpNode final : public InputsNode<N> {
 public:
  // The record step fills the slots in place (no temporaries to move), so a tracked op costs
  // as little as possible beyond the op itself.
  OpNode(const char* op, std::uint64_t newest_parent, std::size_t inputs, Rule rule)
      : InputsNode<N>(op, newest_parent, inputs), rule_(std::move(rule)) {}

  void set_forward(Forward forward) { forward_.emplace(std::move(forward)); }

  bool recomputable() const noexcept override { return forward_.has_value(); }

  Grads backward(Context& context, const NodeRef& self, Primitive grad) override {
    BackwardArgs args(backend_for(grad->device()), context, self, this->saved_, this->output_);
    return (*rule_)(args, std::move(grad));
  }

  Primitive recompute(Context& context) override {
    InputArray<N, Primitive> inputs{};
    if constexpr (N == 0) inputs.resize(this->saved_.size());
    for (std::size_t i = 0; i < this->saved_.size(); ++i) {
      inputs[i] = context.value(this->saved_[i]);
    }
    Backend& backend = backend_for(inputs[0]->device());
    return (*forward_)(backend, std::move(inputs));
  }

  void release() noexcept override {
    this->release_inputs();
    forward_.reset();
    rule_.reset();
  }

 private:
  std::optional<Forward> forward_;
  std::optional<Rule> rule_;
};

}  // namespace kiln::autodiff
