#include "kiln/optim/rmsprop.h"

#include <cmath>

#include "kiln/detail/format.h"

namespace kiln::optim {

namespace ops = kiln::detail;

RmsProp::RmsProp(RmsPropConfig config) : config_(config) {
  const char* op = "RmsPropConfig";
  if (!(config_.alpha >= 0 && config_.alpha <= 1)) {
    ops::fail<InvalidArgument>(op, "alpha ", config_.alpha, " must lie in [0, 1]");
  }
  auto check = [&](double value, const char* what) {
    if (!(value >= 0) || !std::isfinite(value)) {
      ops::fail<InvalidArgument>(op, what, " ", value, " must be a finite number >= 0");
    }
  };
  check(config_.eps, "eps");
  check(config_.weight_decay, "weight_decay");
  check(config_.momentum, "momentum");
}

std::vector<std::string> RmsProp::buffer_names() const {
  std::vector<std::string> names = {"square_avg"};
  if (config_.momentum > 0) names.emplace_back("momentum_buffer");
  if (config_.centered) names.emplace_back("grad_avg");
  return names;
}

Primitive RmsProp::update(Primitive param, Primitive grad, const StepValues& values,
                          ParamState& state) const {
  const RmsPropConfig& c = config_;
  if (c.maximize) grad = ops::neg(std::move(grad));
  if (c.weight_decay != 0) grad = ops::add(std::move(grad), ops::mul_scalar(param, c.weight_decay));
  Primitive square_avg =
      ops::add(ops::mul_scalar(state.take_or_zeros("square_avg", param), c.alpha),
               ops::mul_scalar(ops::square(grad), 1.0 - c.alpha));
  state.put("square_avg", square_avg);
  Primitive variance = std::move(square_avg);
  if (c.centered) {
    Primitive grad_avg = ops::add(ops::mul_scalar(state.take_or_zeros("grad_avg", param), c.alpha),
                                  ops::mul_scalar(grad, 1.0 - c.alpha));
    state.put("grad_avg", grad_avg);
    variance = ops::sub(std::move(variance), ops::square(std::move(grad_avg)));
  }
  Primitive denominator = ops::add_scalar(ops::sqrt(std::move(variance)), c.eps);
  Primitive direction = ops::div(std::move(grad), std::move(denominator));
  if (c.momentum > 0) {
    direction = ops::add(ops::mul_scalar(state.take_or_zeros("momentum_buffer", param), c.momentum),
                         std::move(direction));
    state.put("momentum_buffer", direction);
  }
  return ops::sub(std::move(param), values.mul(std::move(direction), 0));
}

}  // namespace kiln::optim
