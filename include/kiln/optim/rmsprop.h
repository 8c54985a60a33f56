// RMSprop, as PyTorch's torch.optim.RMSprop computes it. For each parameter θ with gradient g:
//
//   g ← -g                                      if maximize
//   g ← g + weight_decay · θ                    if weight_decay ≠ 0
//   v ← α · v + (1 - α) · g²                    v₀ = 0
//   centered: g_avg ← α · g_avg + (1 - α) · g,  and ṽ = v - g_avg²; otherwise ṽ = v
//   if momentum > 0:  b ← momentum · b + g / (√ṽ + eps);  θ ← θ - lr · b      (b₀ = 0)
//   otherwise:        θ ← θ - lr · g / (√ṽ + eps)
//
//   optim::RmsProp opt({.alpha = 0.9, .momentum = 0.9, .centered = true});
//   opt.step(model, grads, 1e-3);
//
// State: "square_avg" (v), "momentum_buffer" when momentum > 0, "grad_avg" when centered.
#pragma once

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct RmsPropConfig {
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;
  bool maximize = false;
};

class RmsProp final : public Optimizer {
 public:
  // Throws InvalidArgument for alpha outside [0, 1] and a negative (or NaN) eps, weight decay or
  // momentum.
  explicit RmsProp(RmsPropConfig config = {});
  const RmsPropConfig& config() const noexcept { return config_; }
  std::string_view name() const noexcept override { return "RMSprop"; }

 private:
  Primitive update(Primitive param, Primitive grad, const StepValues& values,
                   ParamState& state) const override;
  std::vector<std::string> buffer_names() const override;

  RmsPropConfig config_;
};

}  // namespace kiln::optim
