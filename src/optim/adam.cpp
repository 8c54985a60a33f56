#include "kiln/optim/adam.h"

#include <cmath>

#include "kiln/detail/format.h"

namespace kiln::optim {
namespace {

namespace ops = kiln::detail;

// The settings both variants share; decoupled picks AdamW's weight decay.
struct AdamRule {
  double beta1, beta2, eps, weight_decay;
  bool amsgrad, maximize, decoupled;
};

template <class Config>
AdamRule checked_rule(const Config& c, bool decoupled, const char* op) {
  auto check_beta = [&](double beta, const char* what) {
    if (!(beta >= 0 && beta < 1)) {
      ops::fail<InvalidArgument>(op, what, " ", beta, " must lie in [0, 1)");
    }
  };
  auto check_non_negative = [&](double value, const char* what) {
    if (!(value >= 0) || !std::isfinite(value)) {
      ops::fail<InvalidArgument>(op, what, " ", value, " must be a finite number >= 0");
    }
  };
  check_beta(c.beta1, "beta1");
  check_beta(c.beta2, "beta2");
  check_non_negative(c.eps, "eps");
  check_non_negative(c.weight_decay, "weight_decay");
  return {c.beta1, c.beta2, c.eps, c.weight_decay, c.amsgrad, c.maximize, decoupled};
}

std::vector<std::string> adam_buffers(bool amsgrad) {
  if (amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

// values: lr / bias_correction1, sqrt(bias_correction2), 1 - lr * weight_decay (adam_values).
Primitive adam_update(const AdamRule& r, Primitive param, Primitive grad, const StepValues& values,
                      ParamState& state) {
  if (r.maximize) grad = ops::neg(std::move(grad));
  if (r.weight_decay != 0) {
    if (r.decoupled) {
      param = values.mul(std::move(param), 2);
    } else {
      grad = ops::add(std::move(grad), ops::mul_scalar(param, r.weight_decay));
    }
  }
  Primitive m = ops::add(ops::mul_scalar(state.take_or_zeros("exp_avg", param), r.beta1),
                         ops::mul_scalar(grad, 1.0 - r.beta1));
  Primitive v = ops::add(ops::mul_scalar(state.take_or_zeros("exp_avg_sq", param), r.beta2),
                         ops::mul_scalar(ops::square(grad), 1.0 - r.beta2));
  state.put("exp_avg", m);
  state.put("exp_avg_sq", v);
  if (r.amsgrad) {
    v = ops::maximum(state.take_or_zeros("max_exp_avg_sq", param), std::move(v));
    state.put("max_exp_avg_sq", v);
  }
  Primitive denominator = ops::add_scalar(values.div(ops::sqrt(std::move(v)), 1), r.eps);
  Primitive direction = ops::div(std::move(m), std::move(denominator));
  return ops::sub(std::move(param), values.mul(std::move(direction), 0));
}

std::vector<double> adam_values(const AdamRule& r, double lr, std::int64_t step) {
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(r.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(r.beta2, t);
  return {lr / bias_correction1, std::sqrt(bias_correction2), 1.0 - lr * r.weight_decay};
}

}  // namespace

Adam::Adam(AdamConfig config) : config_(config) { checked_rule(config_, false, "AdamConfig"); }

std::vector<std::string> Adam::buffer_names() const { return adam_buffers(config_.amsgrad); }

Primitive Adam::update(Primitive param, Primitive grad, const StepValues& values,
                       ParamState& state) const {
  return adam_update(checked_rule(config_, false, "AdamConfig"), std::move(param), std::move(grad),
                     values, state);
}

std::vector<double> Adam::step_values(double lr, std::int64_t step) const {
  return adam_values(checked_rule(config_, false, "AdamConfig"), lr, step);
}

AdamW::AdamW(AdamWConfig config) : config_(config) { checked_rule(config_, true, "AdamWConfig"); }

std::vector<std::string> AdamW::buffer_names() const { return adam_buffers(config_.amsgrad); }

Primitive AdamW::update(Primitive param, Primitive grad, const StepValues& values,
                        ParamState& state) const {
  return adam_update(checked_rule(config_, true, "AdamWConfig"), std::move(param), std::move(grad),
                     values, state);
}

std::vector<double> AdamW::step_values(double lr, std::int64_t step) const {
  return adam_values(checked_rule(config_, true, "AdamWConfig"), lr, step);
}

}  // namespace kiln::optim
