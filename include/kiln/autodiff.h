// Automatic differentiation: a flag on the device, not a type. Ops on `dev.autodiff()` record
// a graph when an input requires grad; `backward` walks it and returns the Gradients.
//
//   auto x = Tensor<2>::random({8, 8}, Distribution::normal(0, 1), dev.autodiff()).require_grad();
//   auto loss = (x * x).sum();
//   Gradients g = loss.backward();
//   std::optional<Tensor<2>> gx = x.grad(g);
//
// Graph nodes are reference-counted: a forward pass that nobody differentiates frees itself when
// its tensors go, and backward frees the graph it walked unless retain_graph is set.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>

#include "kiln/primitive.h"

namespace kiln {

struct BackwardOptions {
  // Keep the graph (and the values it saved) for another backward over it.
  bool retain_graph = false;
  // Record the backward pass itself, so gradients are tracked tensors that can be
  // differentiated again (second derivatives, Hessian-vector products). Implies retain_graph.
  bool create_graph = false;
  // Called during the pass, on its thread, as soon as the gradient of a leaf is final (every op
  // that read the leaf has passed its part back), with the leaf's id (detail::leaf_id) and the
  // gradient the returned Gradients hold. Data-parallel training (kiln/train/data_parallel.h)
  // starts reducing a bucket of gradients across processes this way while the pass goes on.
  std::function<void(std::uint64_t leaf, const Primitive& grad)> on_leaf_gradient = {};
};

// The gradients one backward pass produced, one per tracked leaf (a tensor made with
// require_grad) that the root depends on. Read them with `x.grad(g)`.
class Gradients {
 public:
  std::size_t size() const noexcept { return grads_.size(); }
  bool empty() const noexcept { return grads_.empty(); }

  // Internal: the store, keyed by the leaf's id (see Tensor::grad).
  std::optional<Primitive> find(std::uint64_t leaf) const;
  std::optional<Primitive> remove(std::uint64_t leaf);
  void put(std::uint64_t leaf, Primitive grad) { grads_[leaf] = std::move(grad); }

 private:
  std::unordered_map<std::uint64_t, Primitive> grads_;
};

// What the graph keeps for backward.
enum class CheckpointStrategy : std::uint8_t {
  // Every value a backward rule needs is stored during the forward pass (the default).
  StoreAll,
  // Outputs of memory-bound ops (elementwise maths, activations, casts) are not stored; backward
  // recomputes them from the nearest stored values. Less memory, a little more compute.
  Balanced,
};

// The strategy ops recorded from now on use on this thread (a graph remembers what it was
// recorded with). The process default is StoreAll.
CheckpointStrategy checkpointing() noexcept;
void set_checkpointing(CheckpointStrategy strategy) noexcept;

// Sets the strategy for a scope on this thread and restores the previous one on exit.
class CheckpointScope {
 public:
  explicit CheckpointScope(CheckpointStrategy strategy) noexcept : previous_(checkpointing()) {
    set_checkpointing(strategy);
  }
  ~CheckpointScope() { set_checkpointing(previous_); }
  CheckpointScope(const CheckpointScope&) = delete;
  CheckpointScope& operator=(const CheckpointScope&) = delete;

 private:
  CheckpointStrategy previous_;
};

namespace detail {

// The functions behind Tensor's autodiff methods (src/decorators/autodiff/tensor_api.cpp).
Primitive require_grad(Primitive x, bool require);
bool is_require_grad(const Primitive& x) noexcept;
Primitive detach(Primitive x);
Gradients backward(const Primitive& root, std::optional<Primitive> seed,
                   const BackwardOptions& options);
std::optional<Primitive> grad(const Primitive& x, const Gradients& grads);
// The id under which Gradients keep x's gradient: x was made with require_grad (nullopt else).
std::optional<std::uint64_t> leaf_id(const Primitive& x) noexcept;
std::optional<Primitive> grad_remove(const Primitive& x, Gradients& grads);
void grad_replace(const Primitive& x, Gradients& grads, Primitive grad);
// The same values on the device without (inner) or with (from_inner) the autodiff flag.
Primitive inner(Primitive x);
Primitive from_inner(Primitive x);

}  // namespace detail
}  // namespace kiln
