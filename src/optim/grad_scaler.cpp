#include "kiln/optim/grad_scaler.h"

#include <cmath>

#include "kiln/detail/format.h"
#include "optim/param_grads.h"

namespace kiln::optim {

namespace detail {

bool unscale_gradients(void* module, nn::detail::VisitFn visit, Gradients& grads, double scale) {
  namespace ops = kiln::detail;
  std::vector<ParamGrad> found = collect_param_grads(module, visit, grads);
  ops::Prims overflow;
  overflow.reserve(found.size());
  for (ParamGrad& pg : found) {
    Primitive unscaled = ops::mul_scalar(std::move(pg.grad), 1.0 / scale);
    // x * 0 is 0 for every finite x and NaN for inf and NaN: the sum says whether any is not.
    overflow.push_back(ops::sum(ops::mul_scalar(unscaled, 0.0)));
    ops::grad_replace(pg.param, grads, std::move(unscaled));
  }
  bool finite = true;
  for (const TensorData& value : ops::read_many(std::move(overflow))) {
    if (!std::isfinite(value.to_f64_vec().at(0))) finite = false;
  }
  return finite;
}

}  // namespace detail

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  const char* op = "GradScaler";
  if (!(std::isfinite(options.init_scale) && options.init_scale > 0)) {
    kiln::detail::fail<InvalidArgument>(op, "init_scale ", options.init_scale,
                                        " must be finite and > 0");
  }
  if (!(std::isfinite(options.growth_factor) && options.growth_factor > 1)) {
    kiln::detail::fail<InvalidArgument>(op, "growth_factor ", options.growth_factor,
                                        " must be finite and > 1");
  }
  if (!(options.backoff_factor > 0 && options.backoff_factor < 1)) {
    kiln::detail::fail<InvalidArgument>(op, "backoff_factor ", options.backoff_factor,
                                        " must be in (0, 1)");
  }
  if (options.growth_interval < 1) {
    kiln::detail::fail<InvalidArgument>(op, "growth_interval ", options.growth_interval,
                                        " must be at least 1");
  }
}

GradScaler GradScaler::for_dtype(DType dtype, GradScalerOptions options) {
  options.enabled = dtype == DType::F16;
  return GradScaler(options);
}

bool GradScaler::unscale_module(void* module, nn::detail::VisitFn visit, Gradients& grads) {
  if (!options_.enabled) return true;
  if (!unscaled_) unscaled_ = detail::unscale_gradients(module, visit, grads, scale_);
  return *unscaled_;
}

bool GradScaler::finish_step(bool finite) {
  unscaled_.reset();
  if (!options_.enabled) return true;
  if (!finite) {
    scale_ *= options_.backoff_factor;
    ++skipped_;
    good_steps_ = 0;
    return false;
  }
  if (++good_steps_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    good_steps_ = 0;
  }
  return true;
}

}  // namespace kiln::optim
