// The graph of the autodiff decorator. A tracked tensor holds the Node that produced it; a node
// holds its parents (the nodes of its tracked inputs) and what its backward rule needs. Nodes
// are reference-counted, so a graph lives exactly as long as some tensor (or Gradients-producing
// backward) can still reach it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "contract/backend.h"

namespace kiln::autodiff {

class Node;
using NodeRef = std::shared_ptr<Node>;
using Grads = std::vector<Primitive>;  // one per input of the op; null = no gradient

// A value a backward rule needs: held (value set), or recomputed from the node that produced it
// (value null; balanced checkpointing). node is the value's producer, null for a constant.
struct Saved {
  Primitive value;
  NodeRef node;
};

class Context;

class Node {
 public:
  // A node without parents (a leaf) takes the next order of its thread; a node with parents is
  // also newer than the newest of them, so the rule holds across threads too.
  explicit Node(const char* op) noexcept : op_(op), order_(next_order()) {}
  Node(const char* op, std::uint64_t newest_parent) noexcept
      : op_(op), order_(std::max(next_order(), newest_parent + 1)) {}
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  const char* op() const noexcept { return op_; }
  // Creation order: every parent is older than its children, so walking nodes from the highest
  // order down visits each node after all its consumers. Leaves' orders are unique (they key
  // Gradients); two op nodes made on different threads may share one.
  std::uint64_t order() const noexcept { return order_; }
  virtual std::span<const NodeRef> parents() const noexcept = 0;
  virtual bool is_leaf() const noexcept { return false; }
  // True when the output is not stored and is recomputed from the inputs when needed.
  virtual bool recomputable() const noexcept { return false; }
  // For a recomputable node: how many recomputable ops in a row lead to it (1 if its inputs are
  // all stored). Bounded, so recomputing one value never recomputes a long chain at once.
  std::uint8_t recompute_depth() const noexcept { return recompute_depth_; }
  void set_recompute_depth(std::uint8_t depth) noexcept { recompute_depth_ = depth; }
  // The gradient of each parent given the gradient of this node's output; self owns this node.
  virtual Grads backward(Context& context, const NodeRef& self, Primitive grad) = 0;
  // This node's output, recomputed (only for recomputable nodes).
  virtual Primitive recompute(Context& context);
  // Drops what backward needed; a later backward through this node is an error.
  virtual void release() noexcept { released_ = true; }
  bool released() const noexcept { return released_; }

 protected:
  // Destroys a chain of nodes without recursion (a deep graph would otherwise overflow the
  // stack): parents about to die are detached and torn down here, one at a time.
  static void drop_parents(std::span<NodeRef> parents) noexcept;
  // Moves the parents out (called on a node about to be destroyed).
  virtual void take_parents(std::vector<NodeRef>& out) noexcept = 0;

 private:
  // Orders come from per-thread blocks of a global counter: no atomic operation per node.
  static std::uint64_t next_order() noexcept;

  const char* op_;
  std::uint64_t order_;
  bool released_ = false;
  std::uint8_t recompute_depth_ = 0;
};

// A tensor made with require_grad: gradients arriving here are the result of backward.
class Leaf final : public Node {
 public:
  Leaf() noexcept : Node("leaf") {}
  std::span<const NodeRef> parents() const noexcept override { return {}; }
  bool is_leaf() const noexcept override { return true; }
  Grads backward(Context&, const NodeRef&, Primitive) override { return {}; }
  void release() noexcept override {}  // leaves outlive every backward

 protected:
  void take_parents(std::vector<NodeRef>&) noexcept override {}
};

// Where backward rules run: on the inner backend with inner primitives, or (create_graph) on
// the autodiff backend with tracked ones, so the backward pass is itself recorded. Each op runs
// on the backend of the device its values live on (a graph may span devices via to_device).
class Context {
 public:
  explicit Context(bool create_graph) noexcept : create_graph_(create_graph) {}

  bool create_graph() const noexcept { return create_graph_; }
  // A saved value in this context's form (recomputing it if it was not stored).
  Primitive value(const Saved& saved);
  // node's output in this context's form, given its inner primitive (null: recompute it).
  Primitive output(const NodeRef& node, const Primitive& stored);
  // Forgets a recomputed output once its node has been through backward.
  void forget(const Node* node) { recomputed_.erase(node); }
  // A primitive in this context's form: tracked by node when building a graph.
  Primitive form(Primitive inner, NodeRef node) const;

 private:
  bool create_graph_;
  std::unordered_map<const Node*, Primitive> recomputed_;
};

}  // namespace kiln::autodiff
