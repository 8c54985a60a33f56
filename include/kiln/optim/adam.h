// Adam and AdamW, as PyTorch's torch.optim.Adam and torch.optim.AdamW compute them. For each
// parameter θ with gradient g, at the parameter's t-th update:
//
//   g ← -g                                       if maximize
//   Adam:  g ← g + weight_decay · θ              (L2 penalty in the gradient)
//   AdamW: θ ← θ · (1 - lr · weight_decay)       (decoupled decay, before the update)
//   m ← β1 · m + (1 - β1) · g                    m₀ = 0
//   v ← β2 · v + (1 - β2) · g²                   v₀ = 0
//   amsgrad: v_max ← max(v_max, v), and v_max stands for v below
//   θ ← θ - lr / (1 - β1^t) · m / (√v / √(1 - β2^t) + eps)
//
// (With amsgrad the running maximum is of v itself and the bias correction applies after it,
// which is what PyTorch computes.)
//
//   optim::AdamW opt({.beta2 = 0.95, .weight_decay = 0.1});
//   opt.step(model, grads, 3e-4);
//
// State: "exp_avg" (m), "exp_avg_sq" (v), and "max_exp_avg_sq" with amsgrad.
#pragma once

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct AdamConfig {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool maximize = false;
};

// AdamW's settings: Adam's with PyTorch's AdamW default weight decay.
struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool maximize = false;
};

// Both throw InvalidArgument for betas outside [0, 1) and a negative (or NaN) eps or weight decay.
class Adam final : public Optimizer {
 public:
  explicit Adam(AdamConfig config = {});
  const AdamConfig& config() const noexcept { return config_; }
  std::string_view name() const noexcept override { return "Adam"; }

 private:
  Primitive update(Primitive param, Primitive grad, const StepValues& values,
                   ParamState& state) const override;
  std::vector<std::string> buffer_names() const override;
  std::vector<double> step_values(double lr, std::int64_t step) const override;

  AdamConfig config_;
};

class AdamW final : public Optimizer {
 public:
  explicit AdamW(AdamWConfig config = {});
  const AdamWConfig& config() const noexcept { return config_; }
  std::string_view name() const noexcept override { return "AdamW"; }

 private:
  Primitive update(Primitive param, Primitive grad, const StepValues& values,
                   ParamState& state) const override;
  std::vector<std::string> buffer_names() const override;
  std::vector<double> step_values(double lr, std::int64_t step) const override;

  AdamWConfig config_;
};

}  // namespace kiln::optim
