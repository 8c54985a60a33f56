// Adam and AdamW against float64 loops of PyTorch's documented algorithms.
#include <kiln/optim/adam.h>

#include <algorithm>

#include "toy_module.h"

namespace kiln::optim {
namespace {

using namespace testing;

// torch.optim.Adam / AdamW, one element at a time, with the bias corrections written as in the
// documentation (m̂ = m / (1 - β1^t), v̂ = v / (1 - β2^t)).
struct AdamReference {
  double beta1, beta2, eps, weight_decay;
  bool amsgrad, maximize, decoupled;
  std::vector<double> m, v, v_max;
  int t = 0;
  bool max_differed = false;  // whether amsgrad's maximum ever departed from v

  template <class Config>
  static AdamReference of(const Config& c, bool decoupled) {
    return {c.beta1, c.beta2, c.eps, c.weight_decay, c.amsgrad, c.maximize, decoupled, {}, {}, {}};
  }

  void step(std::vector<double>& theta, std::vector<double> g, double lr) {
    ++t;
    m.resize(theta.size());
    v.resize(theta.size());
    v_max.resize(theta.size());
    for (std::size_t i = 0; i < theta.size(); ++i) {
      if (maximize) g[i] = -g[i];
      if (decoupled) {
        theta[i] *= 1 - lr * weight_decay;
      } else {
        g[i] += weight_decay * theta[i];
      }
      m[i] = beta1 * m[i] + (1 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
      const double m_hat = m[i] / (1 - std::pow(beta1, t));
      double second = v[i];
      if (amsgrad) {
        v_max[i] = std::max(v_max[i], v[i]);
        max_differed = max_differed || v_max[i] != v[i];
        second = v_max[i];
      }
      const double v_hat = second / (1 - std::pow(beta2, t));
      theta[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
};

TEST(OptimAdam, FollowsTheDocumentedUpdateForEveryVariant) {
  const std::vector<std::pair<std::string, AdamConfig>> cases = {
      {"defaults", {}},
      {"L2 weight decay", {.weight_decay = 0.1}},
      {"amsgrad", {.beta1 = 0.8, .beta2 = 0.9, .amsgrad = true}},
      {"maximize, eps", {.eps = 1e-3, .weight_decay = 0.01, .maximize = true}},
  };
  for (const auto& [label, config] : cases) {
    Adam opt(config);
    auto reference = AdamReference::of(config, false);
    run_against(
        opt, reference, 8, [](int t) { return 0.01 * (1 + t % 3); }, label);
    const ParamState* state = opt.state("b");
    ASSERT_NE(state, nullptr) << label;
    EXPECT_EQ(state->step, 8) << label;
    EXPECT_EQ(state->buffers.size(), config.amsgrad ? 3u : 2u) << label;
    EXPECT_EQ(state->buffers.contains("max_exp_avg_sq"), config.amsgrad) << label;
  }
}

TEST(OptimAdam, AmsgradCaseExercisesTheMaximum) {
  // The amsgrad row above only means something if v falls below its running maximum.
  auto reference =
      AdamReference::of(AdamConfig{.beta1 = 0.8, .beta2 = 0.9, .amsgrad = true}, false);
  Toy toy = make_toy();
  std::vector<double> theta = theta_of(toy);
  for (int t = 0; t < 8; ++t) reference.step(theta, toy_gradient(theta, t), 0.01 * (1 + t % 3));
  EXPECT_TRUE(reference.max_differed);
}

TEST(OptimAdamW, DecouplesWeightDecay) {
  const std::vector<std::pair<std::string, AdamWConfig>> cases = {
      {"defaults (weight decay 0.01)", {}},
      {"strong decay", {.beta2 = 0.95, .weight_decay = 0.5}},
      {"amsgrad, maximize", {.beta2 = 0.9, .amsgrad = true, .maximize = true}},
  };
  for (const auto& [label, config] : cases) {
    AdamW opt(config);
    run_against(
        opt, AdamReference::of(config, true), 8, [](int t) { return 0.02 / (1 + t); }, label);
  }
  EXPECT_EQ(AdamWConfig{}.weight_decay, 1e-2);
  EXPECT_EQ(AdamW().name(), "AdamW");
}

TEST(OptimAdam, BiasCorrectionCountsEachParametersOwnUpdates) {
  // b misses the gradient at step 1: its bias correction at step 2 uses t = 2, not 3.
  Adam opt({.beta1 = 0.5, .beta2 = 0.7});
  Toy toy = make_toy();
  const std::vector<double> theta = theta_of(toy);
  std::vector<double> w(theta.begin(), theta.begin() + kWSize);
  std::vector<double> b(theta.begin() + kWSize, theta.end());
  auto w_ref = AdamReference::of(opt.config(), false);
  auto b_ref = AdamReference::of(opt.config(), false);
  const double lr = 0.05;
  for (int t = 0; t < 3; ++t) {
    const bool with_b = t != 1;
    Gradients grads = toy_backward(toy, t, with_b);
    EXPECT_EQ(opt.step(toy, grads, lr), with_b ? 2u : 1u);
    w_ref.step(w, toy_gradient(w, t), lr);
    if (with_b) b_ref.step(b, toy_gradient(b, t, kWSize), lr);
    expect_near(values(toy.w.primitive()), w, 1e-12, "w, step " + std::to_string(t));
    expect_near(values(toy.b.primitive()), b, 1e-12, "b, step " + std::to_string(t));
  }
  EXPECT_EQ(opt.state("w")->step, 3);
  EXPECT_EQ(opt.state("b")->step, 2);
}

TEST(OptimAdam, WorksInTheParametersDtype) {
  Adam opt({.weight_decay = 0.01});
  Toy toy = make_toy(DType::F32);
  std::vector<double> theta = theta_of(toy);
  auto reference = AdamReference::of(opt.config(), false);
  for (int t = 0; t < 5; ++t) {
    Gradients grads = toy_backward(toy, t);
    opt.step(toy, grads, 0.01);
    reference.step(theta, toy_gradient(theta, t), 0.01);
    expect_near(theta_of(toy), theta, 2e-6, "f32, step " + std::to_string(t));
  }
  EXPECT_EQ(toy.w.val().dtype(), DType::F32);
  EXPECT_TRUE(toy.w.val().device().is_autodiff());
  for (const auto& [name, buffer] : opt.state("w")->buffers) {
    EXPECT_EQ(buffer->dtype(), DType::F32) << name;
    EXPECT_EQ(buffer->device(), kCpu) << name;  // the plain device: state is never tracked
    EXPECT_EQ(buffer->shape(), (Shape{2, 3})) << name;
  }
}

TEST(OptimAdam, RejectsBadSettings) {
  auto message_of = [](auto make) -> std::string {
    try {
      make();
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "no InvalidArgument";
  };
  EXPECT_EQ(message_of([] { Adam({.beta1 = 1.0}); }), "[AdamConfig] beta1 1 must lie in [0, 1)");
  EXPECT_EQ(message_of([] { AdamW({.beta2 = -0.5}); }),
            "[AdamWConfig] beta2 -0.5 must lie in [0, 1)");
  EXPECT_THROW(Adam({.beta2 = std::nan("")}), InvalidArgument);
  EXPECT_THROW(Adam({.eps = -1e-8}), InvalidArgument);
  EXPECT_THROW(AdamW({.weight_decay = -0.01}), InvalidArgument);
  Adam opt;
  Toy toy = make_toy();
  Gradients grads = toy_backward(toy, 0);
  EXPECT_THROW(opt.step(toy, grads, -1e-3), InvalidArgument);
  EXPECT_THROW(opt.step(toy, grads, INFINITY), InvalidArgument);
  EXPECT_TRUE(opt.state_names().empty());
}

}  // namespace
}  // namespace kiln::optim
