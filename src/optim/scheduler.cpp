#include "kiln/optim/scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <span>

#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::optim {
namespace {

using kiln::detail::fail;

void check_step(std::int64_t step, const char* op) {
  if (step < 0) fail<InvalidArgument>(op, "step ", step, " is negative; steps count from 0");
}

void check_rate(double rate, const char* what, const char* op) {
  if (!(rate >= 0) || !std::isfinite(rate)) {
    fail<InvalidArgument>(op, what, " ", rate, " must be a finite number >= 0");
  }
}

void check_positive(std::int64_t value, const char* what, const char* op) {
  if (value <= 0) fail<InvalidArgument>(op, what, " ", value, " must be positive");
}

void check_unit(double value, const char* what, const char* op) {
  if (!(value >= 0 && value <= 1)) {
    fail<InvalidArgument>(op, what, " ", value, " must lie in [0, 1]");
  }
}

// Cosine interpolation from start (pct = 0) to end (pct = 1).
double cosine_between(double start, double end, double pct) {
  return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1.0);
}

}  // namespace

double ConstantLr::lr(std::int64_t step) const {
  const char* op = "ConstantLr::lr";
  check_step(step, op);
  check_rate(base_lr, "base_lr", op);
  return base_lr;
}

double StepLr::lr(std::int64_t step) const {
  const char* op = "StepLr::lr";
  check_step(step, op);
  check_rate(base_lr, "base_lr", op);
  check_positive(step_size, "step_size", op);
  check_rate(gamma, "gamma", op);
  return base_lr * std::pow(gamma, static_cast<double>(step / step_size));
}

double CosineAnnealingLr::lr(std::int64_t step) const {
  const char* op = "CosineAnnealingLr::lr";
  check_step(step, op);
  check_rate(base_lr, "base_lr", op);
  check_rate(eta_min, "eta_min", op);
  check_positive(t_max, "t_max", op);
  return cosine_between(base_lr, eta_min, static_cast<double>(step) / static_cast<double>(t_max));
}

double LinearLr::lr(std::int64_t step) const {
  const char* op = "LinearLr::lr";
  check_step(step, op);
  check_rate(base_lr, "base_lr", op);
  check_unit(start_factor, "start_factor", op);
  check_unit(end_factor, "end_factor", op);
  check_positive(total_iters, "total_iters", op);
  const double progress =
      static_cast<double>(std::min(step, total_iters)) / static_cast<double>(total_iters);
  return base_lr * (start_factor + (end_factor - start_factor) * progress);
}

double WarmupLr::lr(std::int64_t step) const {
  const char* op = "WarmupLr::lr";
  check_step(step, op);
  if (warmup_steps < 0) {
    fail<InvalidArgument>(op, "warmup_steps ", warmup_steps, " must be >= 0");
  }
  check_unit(start_factor, "start_factor", op);
  if (step >= warmup_steps) return then.lr(step - warmup_steps);
  const double progress = static_cast<double>(step) / static_cast<double>(warmup_steps);
  return then.lr(0) * (start_factor + (1.0 - start_factor) * progress);
}

double OneCycleLr::lr(std::int64_t step) const {
  const char* op = "OneCycleLr::lr";
  check_step(step, op);
  check_rate(max_lr, "max_lr", op);
  check_positive(total_steps, "total_steps", op);
  check_unit(pct_start, "pct_start", op);
  if (!(div_factor > 0) || !(final_div_factor > 0)) {
    fail<InvalidArgument>(op, "div_factor ", div_factor, " and final_div_factor ", final_div_factor,
                          " must both be positive");
  }
  if (step > total_steps) {
    fail<InvalidArgument>(op, "step ", step, " is past the schedule's total_steps ", total_steps);
  }
  const double initial_lr = max_lr / div_factor;
  const double min_lr = initial_lr / final_div_factor;
  const double rise_end = pct_start * static_cast<double>(total_steps) - 1.0;
  const double last = static_cast<double>(total_steps) - 1.0;
  struct Phase {
    double end_step, start_lr, end_lr;
  };
  const Phase two[] = {{rise_end, initial_lr, max_lr}, {last, max_lr, min_lr}};
  const Phase three[] = {
      {rise_end, initial_lr, max_lr},
      {2.0 * pct_start * static_cast<double>(total_steps) - 2.0, max_lr, initial_lr},
      {last, initial_lr, min_lr}};
  const std::span<const Phase> phases =
      three_phase ? std::span<const Phase>(three) : std::span<const Phase>(two);
  const double t = static_cast<double>(step);
  double start_step = 0.0;
  for (std::size_t i = 0; i < phases.size(); ++i) {
    const Phase& phase = phases[i];
    if (t <= phase.end_step || i + 1 == phases.size()) {
      const double length = phase.end_step - start_step;
      // A phase of no length (pct_start * total_steps == 1) is already at its end.
      const double pct = length > 0 ? (t - start_step) / length : 1.0;
      return cosine_between(phase.start_lr, phase.end_lr, pct);
    }
    start_step = phase.end_step;
  }
  return min_lr;  // not reached: the last phase always answers
}

}  // namespace kiln::optim
