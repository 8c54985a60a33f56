// Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay, as
// PyTorch's torch.optim.SGD computes it. For each parameter θ with gradient g, step t:
//
//   g ← -g                                   if maximize
//   g ← g + weight_decay · θ                 if weight_decay ≠ 0
//   if momentum ≠ 0:
//     b ← g                                  at the parameter's first update
//     b ← momentum · b + (1 - dampening) · g  after
//     g ← g + momentum · b                   if nesterov, else g ← b
//   θ ← θ - lr · g
//
//   optim::Sgd opt({.momentum = 0.9, .weight_decay = 5e-4, .nesterov = true});
//   opt.step(model, grads, 0.1);
//
// State: "momentum_buffer" when momentum ≠ 0.
#pragma once

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct SgdConfig {
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  // Needs momentum > 0 and dampening = 0.
  bool nesterov = false;
  // Ascend the objective instead of descending it.
  bool maximize = false;
};

class Sgd final : public Optimizer {
 public:
  // Throws InvalidArgument for a negative (or NaN) momentum or weight decay, and for nesterov
  // without momentum or with dampening.
  explicit Sgd(SgdConfig config = {});
  const SgdConfig& config() const noexcept { return config_; }
  std::string_view name() const noexcept override { return "SGD"; }

 private:
  Primitive update(Primitive param, Primitive grad, const StepValues& values,
                   ParamState& state) const override;
  std::vector<std::string> buffer_names() const override;

  SgdConfig config_;
};

}  // namespace kiln::optim
