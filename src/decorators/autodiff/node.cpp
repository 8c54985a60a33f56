#include "decorators/autodiff/node.h"

#include <atomic>

#include "decorators/autodiff/autodiff_tensor.h"
#include "decorators/autodiff/op_node.h"
#include "kiln/detail/format.h"

namespace kiln::autodiff {
namespace {

constexpr std::uint64_t kOrderBlock = 1 << 16;
struct OrderBlock {
  std::uint64_t next = 0;
  std::uint64_t end = 0;
};
__attribute__((tls_model("initial-exec"))) thread_local OrderBlock order_block;
std::atomic<std::uint64_t> order_blocks{1};

}  // namespace

std::uint64_t Node::next_order() noexcept {
  OrderBlock& block = order_block;
  if (block.next == block.end) {
    block.next = order_blocks.fetch_add(kOrderBlock, std::memory_order_relaxed);
    block.end = block.next + kOrderBlock;
  }
  return block.next++;
}

Primitive Node::recompute(Context&) {
  detail::fail<AutodiffError>(op_,
                              "internal: the output of this op was neither stored nor "
                              "recomputable");
}

void Node::drop_parents(std::span<NodeRef> parents) noexcept {
  // Parents that others still hold just lose a reference; only a parent this node owns alone
  // starts a teardown (and only then is a list allocated). Most nodes die with shared or no
  // parents (a leaf, a weight): that case needs no list at all.
  bool any_doomed = false;
  for (NodeRef& p : parents) {
    if (p && p.use_count() == 1) {
      any_doomed = true;
    } else {
      p.reset();
    }
  }
  if (!any_doomed) return;
  std::vector<NodeRef> doomed;
  for (NodeRef& p : parents) {
    if (!p) continue;
    if (p.use_count() > 1) {
      p.reset();
    } else {
      doomed.push_back(std::move(p));
    }
  }
  while (!doomed.empty()) {
    NodeRef node = std::move(doomed.back());
    doomed.pop_back();
    // The last owner takes the node's parents before it dies, so its destructor has none left
    // to recurse into.
    if (node.use_count() == 1) node->take_parents(doomed);
  }
}

Primitive Context::form(Primitive inner, NodeRef node) const {
  if (!create_graph_) return inner;
  return wrap(std::move(inner), std::move(node));
}

Primitive Context::value(const Saved& saved) {
  if (saved.value) return form(saved.value, saved.node);
  if (!saved.node) {
    detail::fail<AutodiffError>("backward", "internal: a rule read a value its op did not save");
  }
  return output(saved.node, nullptr);
}

Primitive Context::output(const NodeRef& node, const Primitive& stored) {
  if (stored) return form(stored, node);
  if (auto it = recomputed_.find(node.get()); it != recomputed_.end()) return it->second;
  Primitive value = node->recompute(*this);
  recomputed_.emplace(node.get(), value);
  return value;
}

Primitive BackwardArgs::in(std::size_t i) const {
  if (i >= saved_.size()) {
    detail::fail<AutodiffError>(node_->op(), "internal: the rule read input ", i, " of an op with ",
                                saved_.size(), " inputs");
  }
  return context_.value(saved_[i]);
}

}  // namespace kiln::autodiff
