#include "kiln/optim/sgd.h"

#include <cmath>

#include "kiln/detail/format.h"

namespace kiln::optim {

namespace ops = kiln::detail;

Sgd::Sgd(SgdConfig config) : config_(config) {
  const char* op = "SgdConfig";
  auto check = [&](double value, const char* what) {
    if (!(value >= 0) || !std::isfinite(value)) {
      ops::fail<InvalidArgument>(op, what, " ", value, " must be a finite number >= 0");
    }
  };
  check(config_.momentum, "momentum");
  check(config_.weight_decay, "weight_decay");
  if (!std::isfinite(config_.dampening)) {
    ops::fail<InvalidArgument>(op, "dampening ", config_.dampening, " must be finite");
  }
  if (config_.nesterov && (config_.momentum <= 0 || config_.dampening != 0)) {
    ops::fail<InvalidArgument>(op, "nesterov needs momentum > 0 and dampening 0, got momentum ",
                               config_.momentum, " and dampening ", config_.dampening);
  }
}

std::vector<std::string> Sgd::buffer_names() const {
  if (config_.momentum == 0) return {};
  return {"momentum_buffer"};
}

Primitive Sgd::update(Primitive param, Primitive grad, const StepValues& values,
                      ParamState& state) const {
  const SgdConfig& c = config_;
  if (c.maximize) grad = ops::neg(std::move(grad));
  if (c.weight_decay != 0) grad = ops::add(std::move(grad), ops::mul_scalar(param, c.weight_decay));
  if (c.momentum != 0) {
    Primitive buffer = state.take("momentum_buffer");
    buffer = buffer ? ops::add(ops::mul_scalar(std::move(buffer), c.momentum),
                               ops::mul_scalar(grad, 1.0 - c.dampening))
                    : grad;
    state.put("momentum_buffer", buffer);
    grad = c.nesterov ? ops::add(std::move(grad), ops::mul_scalar(buffer, c.momentum))
                      : std::move(buffer);
  }
  return ops::sub(std::move(param), values.mul(std::move(grad), 0));
}

}  // namespace kiln::optim
