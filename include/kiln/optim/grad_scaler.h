// Dynamic loss scaling for f16 mixed precision, as PyTorch's GradScaler: the loss is multiplied
// by a large scale before backward, so that small gradients survive f16's narrow range; the
// gradients are divided by it again before the update, and a step whose gradients overflowed
// (inf or NaN) is skipped and the scale lowered.
//
//   optim::GradScaler scaler;                      // scale 65536 at the start
//   {
//     AutocastScope amp(dev, DType::F16);
//     loss = loss_of(model, batch);
//   }
//   Gradients grads = scaler.scale(loss).backward();
//   scaler.unscale(model, grads);                  // only to clip or inspect the gradients
//   optim::clip_grad_norm(model, grads, 1.0);
//   bool stepped = scaler.step(optimizer, model, grads, lr);   // false: skipped, no update
//
// After a skipped step the scale is multiplied by backoff_factor (halved); after
// growth_interval steps in a row without overflow it is multiplied by growth_factor (doubled).
// bf16 has f32's range and needs none of this: GradScaler({.enabled = false}) (or
// GradScaler::for_dtype(DType::BF16)) passes the loss through and steps every time, so a
// training loop can keep one code path for all precisions.
#pragma once

#include <cstdint>

#include "kiln/optim/optimizer.h"
#include "kiln/tensor.h"

namespace kiln::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;           // > 1
  double backoff_factor = 0.5;          // in (0, 1)
  std::int64_t growth_interval = 2000;  // >= 1
  bool enabled = true;
};

namespace detail {
// Divides module's gradients in grads by scale; returns false when one holds an inf or NaN (the
// gradients are divided all the same). One read for all of them.
bool unscale_gradients(void* module, nn::detail::VisitFn visit, Gradients& grads, double scale);
}  // namespace detail

class GradScaler {
 public:
  // InvalidArgument for a scale that is not finite and > 0, or factors and an interval outside
  // the ranges above.
  explicit GradScaler(GradScalerOptions options = {});
  // Enabled for f16, disabled for every other dtype (bf16, f32).
  static GradScaler for_dtype(DType dtype, GradScalerOptions options = {});

  // loss times the scale (loss itself when disabled).
  template <std::size_t D, class K>
  Tensor<D, K> scale(const Tensor<D, K>& loss) const {
    return options_.enabled ? loss * scale_ : loss;
  }

  // Divides module's gradients in grads by the scale, once per step (a second call before
  // step() does nothing). Returns whether they are all finite.
  template <nn::detail::Visitable M>
  bool unscale(const M& module, Gradients& grads) {
    return unscale_module(const_cast<M*>(&module), nn::detail::visit_fn<M>, grads);
  }

  // Unscales grads (unless unscale() did), then steps optimizer with lr, or skips the step when
  // a gradient is inf or NaN; updates the scale. Returns whether the optimizer stepped.
  template <nn::detail::Visitable M>
  bool step(Optimizer& optimizer, M& module, const Gradients& grads, double lr) {
    if (!options_.enabled) {
      optimizer.step(module, grads, lr);  // nothing to unscale or check
      return true;
    }
    Gradients unscaled = grads;
    if (!finish_step(unscale_module(&module, nn::detail::visit_fn<M>, unscaled))) return false;
    optimizer.step(module, unscaled, lr);
    return true;
  }
  template <nn::detail::Visitable M, LrSchedule S>
  bool step(Optimizer& optimizer, M& module, const Gradients& grads, const S& schedule) {
    if (!options_.enabled) {
      optimizer.step(module, grads, schedule);  // nothing to unscale or check
      return true;
    }
    Gradients unscaled = grads;
    if (!finish_step(unscale_module(&module, nn::detail::visit_fn<M>, unscaled))) return false;
    optimizer.step(module, unscaled, schedule);
    return true;
  }

  // The scale the next scale() multiplies by.
  double scale_value() const noexcept { return scale_; }
  bool enabled() const noexcept { return options_.enabled; }
  // Steps skipped for overflowing gradients so far.
  std::int64_t skipped_steps() const noexcept { return skipped_; }
  // Steps since the last skip (the growth tracker).
  std::int64_t steps_since_skip() const noexcept { return good_steps_; }

 private:
  bool unscale_module(void* module, nn::detail::VisitFn visit, Gradients& grads);
  // Updates the scale after a step whose gradients were finite or not; returns finite.
  bool finish_step(bool finite);

  GradScalerOptions options_;
  double scale_;
  std::int64_t skipped_ = 0;
  std::int64_t good_steps_ = 0;
  // unscale() has run since the last step: the verdict it found.
  std::optional<bool> unscaled_;
};

}  // namespace kiln::optim
