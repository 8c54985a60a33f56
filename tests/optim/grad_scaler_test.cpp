// GradScaler: the scaled loss, unscaling, skipped steps on inf/NaN gradients, growth and backoff
// as PyTorch's, the disabled (bf16) scaler, and its errors. References: the same SGD update
// written out in float64.
#include <kiln/optim/grad_scaler.h>
#include <kiln/optim/sgd.h>

#include <limits>

#include "toy_module.h"

namespace kiln::optim {
namespace {

using namespace testing;

// Gradients of the toy's loss at step 0, times scale, with an inf in w's when poisoned.
Gradients scaled_grads(const Toy& toy, double scale, bool poisoned = false) {
  Gradients plain = toy_backward(toy, 0);
  Gradients out;
  for (const Primitive* p : {&toy.w.primitive(), &toy.b.primitive()}) {
    std::vector<double> g = values(*kiln::detail::grad(*p, plain));
    for (double& x : g) x *= scale;
    if (poisoned && p == &toy.w.primitive()) g[2] = std::numeric_limits<double>::infinity();
    const Shape shape = (*p)->shape();
    kiln::detail::grad_replace(
        *p, out,
        Tensor<1>::from_data(
            TensorData::from_vec(g, Shape{shape.num_elements()}).convert((*p)->dtype()), kCpu)
            .reshape(shape)
            .primitive());
  }
  return out;
}

TEST(GradScaler, ScalesTheLossAndStepsWithUnscaledGradients) {
  GradScaler scaler;
  EXPECT_TRUE(scaler.enabled());
  EXPECT_EQ(scaler.scale_value(), 65536.0);
  const auto loss =
      Tensor<1>::from_data(TensorData::from_vec(std::vector<double>{0.75}, Shape{1}), kCpu);
  EXPECT_EQ(values(scaler.scale(loss).primitive()), std::vector<double>{0.75 * 65536.0});

  Toy toy = make_toy();
  const std::vector<double> w0 = values(toy.w.primitive());
  const std::vector<double> g = toy_gradient(theta_of(toy), 0);
  Sgd sgd;
  EXPECT_TRUE(scaler.step(sgd, toy, scaled_grads(toy, scaler.scale_value()), 0.1));
  const auto w1 = values(toy.w.primitive());
  for (std::size_t i = 0; i < kWSize; ++i) EXPECT_NEAR(w1[i], w0[i] - 0.1 * g[i], 1e-12) << i;
  EXPECT_EQ(sgd.steps(), 1);
  EXPECT_EQ(scaler.skipped_steps(), 0);
  EXPECT_EQ(scaler.steps_since_skip(), 1);
}

TEST(GradScaler, AnInfOrNanGradientSkipsTheStepAndHalvesTheScale) {
  for (const bool nan : {false, true}) {
    GradScaler scaler({.init_scale = 1024.0});
    Toy toy = make_toy();
    const auto w0 = values(toy.w.primitive());
    Gradients grads = scaled_grads(toy, 1024.0, true);
    if (nan) grads = scaled_grads(toy, std::numeric_limits<double>::quiet_NaN());
    Sgd sgd;
    EXPECT_FALSE(scaler.step(sgd, toy, grads, 0.1)) << "nan " << nan;
    EXPECT_EQ(values(toy.w.primitive()), w0) << "no parameter changes on a skipped step";
    EXPECT_EQ(sgd.steps(), 0);
    EXPECT_EQ(scaler.scale_value(), 512.0);
    EXPECT_EQ(scaler.skipped_steps(), 1);
    // The next finite step goes through at the lowered scale.
    EXPECT_TRUE(scaler.step(sgd, toy, scaled_grads(toy, 512.0), 0.1));
    EXPECT_EQ(scaler.scale_value(), 512.0);
  }
}

TEST(GradScaler, GrowsAfterGrowthIntervalGoodSteps) {
  GradScaler scaler(
      {.init_scale = 8.0, .growth_factor = 4.0, .backoff_factor = 0.25, .growth_interval = 3});
  Toy toy = make_toy();
  Sgd sgd;
  const double expected[] = {8, 8, 32, 32, 32, 128};
  for (double want : expected) {
    EXPECT_TRUE(scaler.step(sgd, toy, scaled_grads(toy, scaler.scale_value()), 1e-3));
    EXPECT_EQ(scaler.scale_value(), want);
  }
  EXPECT_FALSE(scaler.step(sgd, toy, scaled_grads(toy, scaler.scale_value(), true), 1e-3));
  EXPECT_EQ(scaler.scale_value(), 32.0);
  EXPECT_EQ(scaler.steps_since_skip(), 0) << "a skip restarts the growth count";
}

TEST(GradScaler, UnscaleOnceBeforeClippingThenStep) {
  GradScaler scaler({.init_scale = 256.0});
  Toy toy = make_toy();
  Gradients grads = scaled_grads(toy, 256.0);
  const auto want = values(*kiln::detail::grad(toy.w.primitive(), scaled_grads(toy, 1.0)));
  EXPECT_TRUE(scaler.unscale(toy, grads));
  EXPECT_TRUE(scaler.unscale(toy, grads)) << "a second unscale does nothing";
  const auto got = values(*kiln::detail::grad(toy.w.primitive(), grads));
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
  const auto w0 = values(toy.w.primitive());
  Sgd sgd;
  EXPECT_TRUE(scaler.step(sgd, toy, grads, 0.5));
  const auto w1 = values(toy.w.primitive());
  for (std::size_t i = 0; i < kWSize; ++i) EXPECT_NEAR(w1[i], w0[i] - 0.5 * want[i], 1e-12) << i;
}

TEST(GradScaler, DisabledForBf16PassesEverythingThrough) {
  GradScaler scaler = GradScaler::for_dtype(DType::BF16);
  EXPECT_FALSE(scaler.enabled());
  EXPECT_TRUE(GradScaler::for_dtype(DType::F16).enabled());
  const auto loss =
      Tensor<1>::from_data(TensorData::from_vec(std::vector<double>{0.75}, Shape{1}), kCpu);
  EXPECT_EQ(values(scaler.scale(loss).primitive()), std::vector<double>{0.75});
  Toy toy = make_toy();
  Sgd sgd;
  // Without a scaler to catch them, inf gradients go to the optimizer as they would without one.
  EXPECT_TRUE(scaler.step(sgd, toy, scaled_grads(toy, 1.0, true), 0.1));
  EXPECT_EQ(sgd.steps(), 1);
  EXPECT_EQ(scaler.scale_value(), 65536.0);
}

TEST(GradScaler, RefusesBadSettings) {
  const GradScalerOptions bad[] = {
      {.init_scale = 0.0},     {.init_scale = std::numeric_limits<double>::infinity()},
      {.growth_factor = 1.0},  {.backoff_factor = 1.0},
      {.backoff_factor = 0.0}, {.growth_interval = 0}};
  for (const GradScalerOptions& options : bad) {
    EXPECT_THROW(GradScaler{options}, InvalidArgument);
  }
  try {
    GradScaler scaler({.growth_interval = -3});
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("growth_interval -3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln::optim
