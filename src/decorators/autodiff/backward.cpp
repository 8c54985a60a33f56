// The backward pass: walks the graph from the root, newest node first, so every node has
// received the gradients of all its consumers before its own rule runs.
#include "decorators/autodiff/backward.h"

#include <functional>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "decorators/autocast/autocast_layer.h"
#include "decorators/autodiff/autodiff_backend.h"
#include "kiln/detail/format.h"
#include "runtime/registry.h"

namespace kiln::autodiff {
namespace {

struct Pending {
  NodeRef node;
  Primitive grad;
};

void accumulate(Primitive& total, Primitive grad) {
  if (!total) {
    total = std::move(grad);
    return;
  }
  Backend& b = backend_for(grad->device());
  total = b.add(std::move(total), std::move(grad));
}

// With a leaf-gradient hook: per leaf, how many edges from the nodes reachable from root still
// have to pass their part back. A leaf's gradient is final when its count reaches 0.
std::unordered_map<const Node*, std::size_t> leaf_edges(const NodeRef& root) {
  std::unordered_map<const Node*, std::size_t> edges;
  std::unordered_set<const Node*> seen{root.get()};
  std::vector<const Node*> stack{root.get()};
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    for (const NodeRef& parent : node->parents()) {
      if (!parent) continue;
      if (parent->is_leaf()) ++edges[parent.get()];
      if (seen.insert(parent.get()).second) stack.push_back(parent.get());
    }
  }
  return edges;
}

}  // namespace

Gradients run_backward(const NodeRef& root, Primitive seed, const BackwardOptions& options) {
  // A backward pass inside an AutocastScope runs each rule in the dtypes its forward op ran in
  // (they are the saved tensors' and the incoming gradients' dtypes), as PyTorch's does: the
  // autocast layer is not asked again.
  const autocast::Suspension no_autocast;
  const bool create_graph = options.create_graph;
  const bool retain = options.retain_graph || create_graph;
  Context context(create_graph);

  Gradients grads;
  const auto& hook = options.on_leaf_gradient;
  auto finish_leaf = [&](const Node& leaf, Primitive grad) {
    Primitive stored = create_graph ? std::move(grad) : wrap(std::move(grad));
    if (hook) hook(leaf.order(), stored);
    grads.put(leaf.order(), std::move(stored));
  };
  std::unordered_map<const Node*, std::size_t> edges;
  if (hook) edges = leaf_edges(root);
  // Keyed by order, then identity: op nodes made on different threads may share an order, but
  // such nodes never depend on each other, so either may go first.
  using Key = std::pair<std::uint64_t, const Node*>;
  std::map<Key, Pending, std::greater<>> pending;
  pending.emplace(Key{root->order(), root.get()}, Pending{root, std::move(seed)});
  while (!pending.empty()) {
    auto first = pending.begin();
    NodeRef node = std::move(first->second.node);
    Primitive grad = std::move(first->second.grad);
    pending.erase(first);

    if (node->released()) {
      detail::fail<AutodiffError>(
          "backward", "the graph through '", node->op(),
          "' was freed by an earlier backward; pass BackwardOptions{.retain_graph = true} to "
          "the first backward to walk a graph twice");
    }
    if (node->is_leaf()) {
      finish_leaf(*node, std::move(grad));
      continue;
    }
    Grads parent_grads = node->backward(context, node, std::move(grad));
    const auto parents = node->parents();
    for (std::size_t i = 0; i < parents.size(); ++i) {
      if (!parents[i]) continue;
      const Key key{parents[i]->order(), parents[i].get()};
      if (i < parent_grads.size() && parent_grads[i]) {
        Pending& slot = pending[key];
        if (!slot.node) slot.node = parents[i];
        accumulate(slot.grad, std::move(parent_grads[i]));
      }
      // The leaf's last edge: its gradient is final now, not when the walk reaches its order.
      if (hook && parents[i]->is_leaf() && --edges[parents[i].get()] == 0) {
        auto done = pending.find(key);
        if (done != pending.end()) {
          Primitive total = std::move(done->second.grad);
          pending.erase(done);
          finish_leaf(*parents[i], std::move(total));
        }
      }
    }
    if (!retain) node->release();
    context.forget(node.get());
  }
  return grads;
}

}  // namespace kiln::autodiff
