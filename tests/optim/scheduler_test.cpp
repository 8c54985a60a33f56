// Learning-rate schedules against their closed forms and hand-computed anchor values.
#include <gtest/gtest.h>
#include <kiln/error.h>
#include <kiln/optim/scheduler.h>

#include <cmath>
#include <numbers>

namespace kiln::optim {
namespace {

constexpr double kPi = std::numbers::pi;

TEST(OptimScheduler, ConstantAndStep) {
  const ConstantLr constant{.base_lr = 0.3};
  for (std::int64_t t : {0, 1, 1000}) EXPECT_EQ(constant.lr(t), 0.3);
  const StepLr step{.base_lr = 0.1, .step_size = 3, .gamma = 0.5};
  const double expected[] = {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125};
  for (std::int64_t t = 0; t < 10; ++t) EXPECT_DOUBLE_EQ(step.lr(t), expected[t]) << t;
  EXPECT_DOUBLE_EQ(step.lr(300), 0.1 * std::pow(0.5, 100));
}

TEST(OptimScheduler, CosineAnnealing) {
  const CosineAnnealingLr cosine{.base_lr = 0.1, .t_max = 10, .eta_min = 0.001};
  EXPECT_DOUBLE_EQ(cosine.lr(0), 0.1);
  EXPECT_DOUBLE_EQ(cosine.lr(5), (0.1 + 0.001) / 2);
  EXPECT_NEAR(cosine.lr(10), 0.001, 1e-17);
  // (1 + cos(pi / 5)) / 2 = 0.9045084971874737
  EXPECT_NEAR(cosine.lr(2), 0.001 + 0.099 * 0.9045084971874737, 1e-16);
  // Past t_max the cosine climbs back, as PyTorch's closed form does.
  EXPECT_DOUBLE_EQ(cosine.lr(15), (0.1 + 0.001) / 2);
  EXPECT_DOUBLE_EQ(cosine.lr(20), 0.1);
  for (std::int64_t t = 0; t < 10; ++t) {
    EXPECT_LE(cosine.lr(t + 1), cosine.lr(t)) << "decreasing up to t_max, t = " << t;
  }
}

TEST(OptimScheduler, LinearLikePyTorchsLinearLr) {
  const LinearLr linear{.base_lr = 0.3, .start_factor = 0.5, .end_factor = 1.0, .total_iters = 4};
  const double expected[] = {0.15, 0.1875, 0.225, 0.2625, 0.3, 0.3, 0.3};
  for (std::int64_t t = 0; t < 7; ++t) EXPECT_DOUBLE_EQ(linear.lr(t), expected[t]) << t;
  const LinearLr decay{.base_lr = 1.0, .start_factor = 1.0, .end_factor = 0.0, .total_iters = 10};
  EXPECT_DOUBLE_EQ(decay.lr(3), 0.7);
  EXPECT_EQ(decay.lr(25), 0.0);
}

TEST(OptimScheduler, WarmupThenCosine) {
  const WarmupLr schedule{.warmup_steps = 4,
                          .start_factor = 0.2,
                          .then = CosineAnnealingLr{.base_lr = 1.0, .t_max = 8, .eta_min = 0.0}};
  // Warm-up: 0.2, 0.4, 0.6, 0.8 of the cosine's starting rate; then the cosine from its step 0.
  EXPECT_DOUBLE_EQ(schedule.lr(0), 0.2);
  EXPECT_DOUBLE_EQ(schedule.lr(1), 0.4);
  EXPECT_DOUBLE_EQ(schedule.lr(2), 0.6);
  EXPECT_DOUBLE_EQ(schedule.lr(3), 0.8);
  EXPECT_DOUBLE_EQ(schedule.lr(4), 1.0);
  EXPECT_DOUBLE_EQ(schedule.lr(8), 0.5);
  EXPECT_NEAR(schedule.lr(12), 0.0, 1e-17);
  // (1 + cos(3 pi / 8)) / 2
  EXPECT_DOUBLE_EQ(schedule.lr(7), (1 + std::cos(3 * kPi / 8)) / 2);
  // Schedules nest and copy as values.
  const WarmupLr twice{.warmup_steps = 2, .start_factor = 0.0, .then = schedule};
  const LrScheduler erased = twice;
  EXPECT_EQ(erased.lr(0), 0.0);
  EXPECT_DOUBLE_EQ(erased.lr(1), 0.1);
  EXPECT_DOUBLE_EQ(erased.lr(3), 0.4);
  const WarmupLr none{.warmup_steps = 0,
                      .then = StepLr{.base_lr = 2.0, .step_size = 1, .gamma = 0.5}};
  EXPECT_EQ(none.lr(0), 2.0);
  EXPECT_EQ(none.lr(2), 0.5);
}

// OneCycleLR(max_lr=1, total_steps=100, pct_start=0.3, div_factor=25, final_div_factor=1e4):
// up from 0.04 over steps 0..29, then down to 4e-6 at step 99.
TEST(OptimScheduler, OneCycleTwoPhases) {
  const OneCycleLr one{.max_lr = 1.0, .total_steps = 100};
  const double initial = 0.04, minimum = 0.04 / 1e4;
  auto cosine = [](double from, double to, double pct) {
    return to + (from - to) * (1 + std::cos(kPi * pct)) / 2;
  };
  EXPECT_NEAR(one.lr(0), initial, 1e-14);
  EXPECT_NEAR(one.lr(29), 1.0, 1e-14);
  EXPECT_NEAR(one.lr(99), minimum, 1e-14);
  EXPECT_NEAR(one.lr(10), cosine(initial, 1.0, 10.0 / 29.0), 1e-14);
  // The descent is measured from step 29: step 64 is half way to step 99.
  EXPECT_NEAR(one.lr(64), (1.0 + minimum) / 2, 1e-14);
  EXPECT_NEAR(one.lr(30), cosine(1.0, minimum, 1.0 / 70.0), 1e-14);
  // PyTorch accepts the step after the last and refuses the one after it.
  EXPECT_NEAR(one.lr(100), cosine(1.0, minimum, 71.0 / 70.0), 1e-14);
  EXPECT_THROW(one.lr(101), InvalidArgument);
  // Up then down.
  for (std::int64_t t = 0; t < 29; ++t) EXPECT_LT(one.lr(t), one.lr(t + 1)) << t;
  for (std::int64_t t = 29; t < 99; ++t) EXPECT_GT(one.lr(t), one.lr(t + 1)) << t;
}

TEST(OptimScheduler, OneCycleThreePhases) {
  const OneCycleLr one{.max_lr = 0.5,
                       .total_steps = 50,
                       .pct_start = 0.2,
                       .div_factor = 10,
                       .final_div_factor = 100,
                       .three_phase = true};
  const double initial = 0.05, minimum = 0.0005;
  // Phase ends: 0.2 * 50 - 1 = 9, 2 * 0.2 * 50 - 2 = 18, 49.
  EXPECT_NEAR(one.lr(0), initial, 1e-14);
  EXPECT_NEAR(one.lr(9), 0.5, 1e-14);
  EXPECT_NEAR(one.lr(18), initial, 1e-14);
  EXPECT_NEAR(one.lr(49), minimum, 1e-14);
  EXPECT_NEAR(one.lr(27), 0.05 - (0.05 - 0.0005) * (1 - std::cos(kPi * 9 / 31)) / 2, 1e-14);
  EXPECT_NEAR(one.lr(13), 0.05 + (0.5 - 0.05) * (1 + std::cos(kPi * 4 / 9)) / 2, 1e-14);
}

TEST(OptimScheduler, RejectsBadSettingsWithClearMessages) {
  auto message_of = [](auto schedule, std::int64_t step) -> std::string {
    try {
      schedule.lr(step);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "no InvalidArgument";
  };
  EXPECT_EQ(message_of(StepLr{.base_lr = 0.1, .step_size = 0}, 0),
            "[StepLr::lr] step_size 0 must be positive");
  EXPECT_EQ(message_of(ConstantLr{.base_lr = -0.1}, 0),
            "[ConstantLr::lr] base_lr -0.1 must be a finite number >= 0");
  EXPECT_EQ(message_of(CosineAnnealingLr{.base_lr = 0.1, .t_max = 10}, -1),
            "[CosineAnnealingLr::lr] step -1 is negative; steps count from 0");
  EXPECT_EQ(message_of(OneCycleLr{.max_lr = 0.1, .total_steps = 10}, 11),
            "[OneCycleLr::lr] step 11 is past the schedule's total_steps 10");
  EXPECT_THROW(CosineAnnealingLr({.t_max = 0}).lr(0), InvalidArgument);
  EXPECT_THROW(OneCycleLr({.total_steps = 10, .pct_start = 1.5}).lr(0), InvalidArgument);
  EXPECT_THROW(OneCycleLr({.total_steps = 10, .div_factor = 0}).lr(0), InvalidArgument);
  EXPECT_THROW(LinearLr({.start_factor = 2.0}).lr(0), InvalidArgument);
  EXPECT_THROW(WarmupLr({.warmup_steps = -1}).lr(0), InvalidArgument);
  EXPECT_THROW(WarmupLr({.warmup_steps = 3, .then = ConstantLr{.base_lr = -1}}).lr(0),
               InvalidArgument);
}

}  // namespace
}  // namespace kiln::optim
