// Gradient clipping, applied to the Gradients of a backward pass before the optimizer step.
// Both act on the gradients of module's trainable parameters only; other entries of grads are
// left alone.
//
//   Gradients grads = loss.backward();
//   double norm = optim::clip_grad_norm(model, grads, 1.0);   // PyTorch's clip_grad_norm_
//   optim::clip_grad_value(model, grads, 0.5);                // PyTorch's clip_grad_value_
//   opt.step(model, grads, lr);
#pragma once

#include "kiln/nn/module.h"

namespace kiln::optim {

struct ClipNormOptions {
  // p of the norm: any p > 0, or infinity for the largest magnitude.
  double norm_type = 2.0;
  // Throw InvalidArgument when the total norm is NaN or infinite, instead of scaling the
  // gradients by it (which turns them into NaN, as PyTorch does by default).
  bool error_if_nonfinite = false;
};

namespace detail {
double clip_grad_norm(void* module, nn::detail::VisitFn visit, Gradients& grads, double max_norm,
                      const ClipNormOptions& options);
void clip_grad_value(void* module, nn::detail::VisitFn visit, Gradients& grads, double clip_value);
}  // namespace detail

// Scales the gradients so that their total norm, the p-norm of the per-gradient p-norms (the
// norm of all of them concatenated), is at most max_norm, as PyTorch does: each gradient is
// multiplied by max_norm / (total + 1e-6) when that is below 1, and left untouched otherwise.
// Returns the total norm before clipping (0 when no parameter has a gradient). InvalidArgument
// for a negative or NaN max_norm or a norm_type that is not > 0.
template <nn::detail::Visitable M>
double clip_grad_norm(const M& module, Gradients& grads, double max_norm,
                      const ClipNormOptions& options = {}) {
  return detail::clip_grad_norm(const_cast<M*>(&module), nn::detail::visit_fn<M>, grads, max_norm,
                                options);
}

// Clamps every gradient element into [-clip_value, clip_value] (clip_value >= 0; InvalidArgument
// otherwise).
template <nn::detail::Visitable M>
void clip_grad_value(const M& module, Gradients& grads, double clip_value) {
  detail::clip_grad_value(const_cast<M*>(&module), nn::detail::visit_fn<M>, grads, clip_value);
}

}  // namespace kiln::optim
