// Learning-rate schedules: small value types whose lr(step) is a pure function of the optimizer
// step (0 for the first update), so a resumed run gets exactly the rates it would have had.
// Each follows the closed form of the PyTorch scheduler of the same name.
//
//   optim::WarmupLr schedule{.warmup_steps = 500, .start_factor = 0.01,
//                            .then = optim::CosineAnnealingLr{.base_lr = 3e-4, .t_max = 9500}};
//   opt.step(model, grads, schedule);          // uses schedule.lr(opt.steps())
//   double lr = schedule.lr(1234);
//
// Invalid settings (negative rates, non-positive periods, a negative step) throw
// InvalidArgument from lr().
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>

namespace kiln::optim {

// Anything with `double lr(std::int64_t step) const`.
template <class S>
concept LrSchedule = requires(const S& schedule, std::int64_t step) {
  { schedule.lr(step) } -> std::convertible_to<double>;
};

// Any schedule behind one type, so schedules compose (WarmupLr::then) and can be stored.
class LrScheduler {
 public:
  template <LrSchedule S>
  requires(!std::same_as<std::remove_cvref_t<S>, LrScheduler>)
      LrScheduler(S schedule)  // NOLINT: implicit, so any schedule converts
      : lr_([s = std::move(schedule)](std::int64_t step) {
          return static_cast<double>(s.lr(step));
        }) {}
  double lr(std::int64_t step) const { return lr_(step); }

 private:
  std::function<double(std::int64_t)> lr_;
};

// The same rate at every step.
struct ConstantLr {
  double base_lr = 1e-3;
  double lr(std::int64_t step) const;
};

// PyTorch's StepLR: base_lr * gamma^floor(step / step_size).
struct StepLr {
  double base_lr = 1e-3;
  std::int64_t step_size = 1;
  double gamma = 0.1;
  double lr(std::int64_t step) const;
};

// PyTorch's CosineAnnealingLR (its closed form):
//   eta_min + (base_lr - eta_min) * (1 + cos(pi * step / t_max)) / 2.
// Past t_max the cosine continues (the rate climbs back over the next t_max steps), as PyTorch's.
struct CosineAnnealingLr {
  double base_lr = 1e-3;
  std::int64_t t_max = 1;
  double eta_min = 0.0;
  double lr(std::int64_t step) const;
};

// PyTorch's LinearLR: base_lr times a factor going linearly from start_factor to end_factor
// over total_iters steps, end_factor after.
struct LinearLr {
  double base_lr = 1e-3;
  double start_factor = 1.0 / 3.0;
  double end_factor = 1.0;
  std::int64_t total_iters = 5;
  double lr(std::int64_t step) const;
};

// Linear warm-up, then another schedule restarted at step 0:
//   step < warmup_steps: then.lr(0) * (start_factor + (1 - start_factor) * step / warmup_steps)
//   otherwise:           then.lr(step - warmup_steps)
// the same rates as PyTorch's SequentialLR([LinearLR(start_factor, 1.0, warmup_steps), then],
// milestones=[warmup_steps]).
struct WarmupLr {
  std::int64_t warmup_steps = 0;
  double start_factor = 1.0 / 3.0;
  LrScheduler then = ConstantLr{};
  double lr(std::int64_t step) const;
};

// PyTorch's OneCycleLR with cosine annealing: from max_lr / div_factor up to max_lr over the
// first pct_start of total_steps, then down to max_lr / (div_factor * final_div_factor). With
// three_phase, it comes back down to the initial rate symmetrically before the final descent.
// Phase boundaries are PyTorch's (phase one ends at step pct_start * total_steps - 1); steps up
// to total_steps are valid, later ones throw, as PyTorch's scheduler does. (PyTorch also cycles
// the momentum; that is not part of this schedule.)
struct OneCycleLr {
  double max_lr = 1e-3;
  std::int64_t total_steps = 1;
  double pct_start = 0.3;
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  bool three_phase = false;
  double lr(std::int64_t step) const;
};

}  // namespace kiln::optim
