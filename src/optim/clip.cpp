#include "kiln/optim/clip.h"

#include <cmath>

#include "kiln/detail/format.h"
#include "optim/param_grads.h"

namespace kiln::optim::detail {

namespace ops = kiln::detail;

double clip_grad_norm(void* module, nn::detail::VisitFn visit, Gradients& grads, double max_norm,
                      const ClipNormOptions& options) {
  const char* op = "clip_grad_norm";
  if (!(max_norm >= 0)) ops::fail<InvalidArgument>(op, "max_norm ", max_norm, " must be >= 0");
  const double p = options.norm_type;
  if (!(p > 0)) ops::fail<InvalidArgument>(op, "norm_type ", p, " must be > 0 (or infinity)");
  std::vector<ParamGrad> found = collect_param_grads(module, visit, grads);
  if (found.empty()) return 0.0;
  ops::Prims norms;
  norms.reserve(found.size());
  for (const ParamGrad& pg : found) {
    // An empty gradient adds nothing (and has no largest magnitude to take).
    if (pg.grad->shape().num_elements() > 0) norms.push_back(ops::norm(pg.grad, p));
  }
  // One read for all the norms, so a device synchronises once.
  const std::vector<TensorData> values = ops::read_many(std::move(norms));
  double total = 0.0;
  for (const TensorData& value : values) {
    const double n = value.to_f64_vec().at(0);
    total = std::isinf(p) ? std::max(total, n) : total + std::pow(n, p);
    if (std::isnan(n)) total = n;
  }
  if (!std::isinf(p)) total = std::pow(total, 1.0 / p);
  if (options.error_if_nonfinite && !std::isfinite(total)) {
    ops::fail<InvalidArgument>(op, "the total ", p, "-norm of the gradients is ", total,
                               "; set error_if_nonfinite = false to clip anyway");
  }
  const double coefficient = max_norm / (total + 1e-6);
  // A NaN total gives a NaN coefficient, which fails `< 1` yet must still poison the gradients.
  if (coefficient < 1.0 || std::isnan(coefficient)) {
    for (ParamGrad& pg : found) {
      ops::grad_replace(pg.param, grads, ops::mul_scalar(std::move(pg.grad), coefficient));
    }
  }
  return total;
}

void clip_grad_value(void* module, nn::detail::VisitFn visit, Gradients& grads, double clip_value) {
  const char* op = "clip_grad_value";
  if (!(clip_value >= 0)) {
    ops::fail<InvalidArgument>(op, "clip_value ", clip_value, " must be >= 0");
  }
  for (ParamGrad& pg : collect_param_grads(module, visit, grads)) {
    ops::grad_replace(pg.param, grads, ops::clamp(std::move(pg.grad), -clip_value, clip_value));
  }
}

}  // namespace kiln::optim::detail
