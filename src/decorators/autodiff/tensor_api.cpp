// The functions behind Tensor's autodiff methods, the checkpointing setting and Gradients.
#include "decorators/autodiff/autodiff_backend.h"
#include "decorators/autodiff/backward.h"
#include "kiln/detail/format.h"
#include "runtime/registry.h"

namespace kiln {

std::optional<Primitive> Gradients::find(std::uint64_t leaf) const {
  auto it = grads_.find(leaf);
  if (it == grads_.end()) return std::nullopt;
  return it->second;
}

std::optional<Primitive> Gradients::remove(std::uint64_t leaf) {
  auto it = grads_.find(leaf);
  if (it == grads_.end()) return std::nullopt;
  Primitive grad = std::move(it->second);
  grads_.erase(it);
  return grad;
}

namespace {

// The thread's strategy, kUnset until set_checkpointing; initial-exec TLS because every recorded
// elementwise op reads it (the general model costs a call into the dynamic linker).
constexpr std::uint8_t kUnset = 0xff;
__attribute__((tls_model("initial-exec"))) thread_local std::uint8_t thread_checkpointing = kUnset;

}  // namespace

CheckpointStrategy checkpointing() noexcept {
  return thread_checkpointing == kUnset ? CheckpointStrategy::StoreAll
                                        : static_cast<CheckpointStrategy>(thread_checkpointing);
}

void set_checkpointing(CheckpointStrategy strategy) noexcept {
  thread_checkpointing = static_cast<std::uint8_t>(strategy);
}

namespace detail {
namespace {

using autodiff::AutodiffTensor;

autodiff::AutodiffBackend& autodiff_backend(const Device& device) {
  return static_cast<autodiff::AutodiffBackend&>(chain_backend_for(device.autodiff()));
}

// The leaf id of x, when x is a tensor made with require_grad.
std::optional<std::uint64_t> leaf_of(const Primitive& x) {
  const autodiff::NodeRef& node = autodiff::node_of(x);
  if (!node || !node->is_leaf()) return std::nullopt;
  return node->order();
}

}  // namespace

std::optional<std::uint64_t> leaf_id(const Primitive& x) noexcept { return leaf_of(x); }

Primitive require_grad(Primitive x, bool require) {
  if (!x->device().is_autodiff()) {
    fail<AutodiffError>("require_grad", "a tensor on ", x->device().to_string(),
                        " cannot record gradients; create it on ", x->device().to_string(),
                        ".autodiff() or move it there with to_device(dev.autodiff())");
  }
  if (!is_float(x->dtype())) {
    fail<AutodiffError>("require_grad", "only float tensors have gradients, got ",
                        dtype_name(x->dtype()));
  }
  if (!require) return detach(std::move(x));
  if (leaf_of(x)) return x;
  return autodiff::wrap(autodiff::inner_of(x), std::make_shared<autodiff::Leaf>());
}

bool is_require_grad(const Primitive& x) noexcept { return autodiff::node_of(x) != nullptr; }

Primitive detach(Primitive x) {
  if (!autodiff::node_of(x)) return x;
  return autodiff::wrap(autodiff::inner_of(x));
}

Gradients backward(const Primitive& root, std::optional<Primitive> seed,
                   const BackwardOptions& options) {
  const autodiff::NodeRef& node = autodiff::node_of(root);
  if (!node) {
    fail<AutodiffError>("backward",
                        "the tensor is not tracked (no input of it required grad); "
                        "call require_grad() on the inputs, on a device made with "
                        ".autodiff(), before computing it");
  }
  autodiff::AutodiffBackend& backend = autodiff_backend(root->device());
  Primitive start;
  if (seed) {
    if ((*seed)->shape() != root->shape()) {
      fail<ShapeMismatch>("backward", "the seed gradient has shape ", (*seed)->shape().to_string(),
                          " but the tensor has shape ", root->shape().to_string());
    }
    if (!(*seed)->device().same_hardware(root->device())) {
      fail<DeviceMismatch>("backward", "the seed gradient is on ", (*seed)->device().to_string(),
                           " but the tensor is on ", root->device().to_string());
    }
    start = autodiff::inner_of(*seed);
    if (start->dtype() != root->dtype())
      start = backend.inner().cast(std::move(start), root->dtype());
    if (options.create_graph) {
      // A tracked seed of another dtype (a 16-bit seed of an f32 loss) is cast on the graph, so
      // that what is recorded stays differentiable in the seed.
      if (!autodiff::is_autodiff(*seed)) {
        start = autodiff::wrap(std::move(start));
      } else {
        start = (*seed)->dtype() == root->dtype() ? *seed : backend.cast(*seed, root->dtype());
      }
    }
  } else {
    if (root->shape().num_elements() != 1) {
      fail<AutodiffError>("backward", "a tensor of shape ", root->shape().to_string(),
                          " has no implied gradient; reduce it to one element first (e.g. "
                          ".sum() or .mean()) or pass a seed gradient: backward(seed, options)");
    }
    start = backend.inner().ones(root->shape(), root->dtype(), root->device().without_autodiff());
    if (options.create_graph) start = autodiff::wrap(std::move(start));
  }
  // The forward pass's recorded ops start on an asynchronous device now, so that they run while
  // the backward pass is recorded: on a fused device nothing would otherwise run before the
  // first read after it (a training step's loss, or the next step's first product), and the
  // device would wait out the host's whole recording of the step.
  if (root->device().kind() != DeviceKind::Cpu) backend.inner().flush();
  return autodiff::run_backward(node, std::move(start), options);
}

std::optional<Primitive> grad(const Primitive& x, const Gradients& grads) {
  const auto leaf = leaf_of(x);
  if (!leaf) return std::nullopt;
  return grads.find(*leaf);
}

std::optional<Primitive> grad_remove(const Primitive& x, Gradients& grads) {
  const auto leaf = leaf_of(x);
  if (!leaf) return std::nullopt;
  return grads.remove(*leaf);
}

void grad_replace(const Primitive& x, Gradients& grads, Primitive grad) {
  const auto leaf = leaf_of(x);
  if (!leaf) {
    fail<AutodiffError>("grad_replace",
                        "the tensor does not require grad, so it has no "
                        "gradient to replace; call require_grad() first");
  }
  if (grad->shape() != x->shape()) {
    fail<ShapeMismatch>("grad_replace", "the gradient has shape ", grad->shape().to_string(),
                        " but the tensor has shape ", x->shape().to_string());
  }
  if (!grad->device().same_hardware(x->device())) {
    fail<DeviceMismatch>("grad_replace", "the gradient is on ", grad->device().to_string(),
                         " but the tensor is on ", x->device().to_string());
  }
  grads.put(*leaf, autodiff::is_autodiff(grad) ? std::move(grad) : autodiff::wrap(std::move(grad)));
}

Primitive inner(Primitive x) {
  if (!x->device().is_autodiff()) return x;
  return autodiff::inner_of(x);
}

Primitive from_inner(Primitive x) {
  if (x->device().is_autodiff()) {
    fail<AutodiffError>("from_inner", "the tensor is on ", x->device().to_string(),
                        " already; from_inner takes a tensor of the inner device");
  }
  // Make sure the autodiff backend of this hardware exists, as a tensor on it will use it.
  autodiff_backend(x->device());
  return autodiff::wrap(std::move(x));
}

}  // namespace detail
}  // namespace kiln
