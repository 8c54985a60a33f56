// SGD against a float64 loop of PyTorch's documented algorithm.
#include <kiln/optim/scheduler.h>
#include <kiln/optim/sgd.h>

#include "toy_module.h"

namespace kiln::optim {
namespace {

using namespace testing;

// torch.optim.SGD's pseudo-code, one element at a time (maximize negates the gradient first).
struct SgdReference {
  explicit SgdReference(SgdConfig config) : c(config) {}

  SgdConfig c;
  std::vector<double> buffer;

  void step(std::vector<double>& theta, std::vector<double> g, double lr) {
    const bool first = buffer.empty();
    buffer.resize(theta.size());
    for (std::size_t i = 0; i < theta.size(); ++i) {
      if (c.maximize) g[i] = -g[i];
      if (c.weight_decay != 0) g[i] += c.weight_decay * theta[i];
      if (c.momentum != 0) {
        buffer[i] = first ? g[i] : c.momentum * buffer[i] + (1 - c.dampening) * g[i];
        g[i] = c.nesterov ? g[i] + c.momentum * buffer[i] : buffer[i];
      }
      theta[i] -= lr * g[i];
    }
  }
};

TEST(OptimSgd, FollowsTheDocumentedUpdateForEveryVariant) {
  const std::vector<std::pair<std::string, SgdConfig>> cases = {
      {"plain", {}},
      {"momentum", {.momentum = 0.9}},
      {"momentum, dampening", {.momentum = 0.8, .dampening = 0.3}},
      {"nesterov, weight decay", {.momentum = 0.9, .weight_decay = 0.05, .nesterov = true}},
      {"maximize, momentum, weight decay",
       {.momentum = 0.5, .weight_decay = 0.1, .maximize = true}},
  };
  for (const auto& [label, config] : cases) {
    Sgd opt(config);
    run_against(
        opt, SgdReference(config), 6, [](int) { return 0.05; }, label);
    const ParamState* state = opt.state("w");
    ASSERT_NE(state, nullptr) << label;
    EXPECT_EQ(state->step, 6) << label;
    EXPECT_EQ(state->buffers.contains("momentum_buffer"), config.momentum != 0) << label;
    EXPECT_EQ(opt.state("unused"), nullptr) << label;
    EXPECT_EQ(opt.state("stats"), nullptr) << label;
  }
}

TEST(OptimSgd, TakesItsRateFromASchedule) {
  const StepLr schedule{.base_lr = 0.1, .step_size = 2, .gamma = 0.5};
  Sgd opt({.momentum = 0.9});
  Toy toy = make_toy();
  std::vector<double> theta = theta_of(toy);
  SgdReference reference({.momentum = 0.9});
  for (int t = 0; t < 6; ++t) {
    Gradients grads = toy_backward(toy, t);
    opt.step(toy, grads, schedule);
    reference.step(theta, toy_gradient(theta, t), 0.1 * std::pow(0.5, t / 2));
    expect_near(theta_of(toy), theta, 1e-12, "step " + std::to_string(t));
  }
}

TEST(OptimSgd, LeavesParametersWithoutGradientsAndTheirStateAlone) {
  Sgd opt({.momentum = 0.9});
  Toy toy = make_toy();
  Gradients grads = toy_backward(toy, 0);
  ASSERT_EQ(opt.step(toy, grads, 0.1), 2u);
  const std::vector<double> b_before = values(toy.b.primitive());
  const Primitive b_param = toy.b.primitive();
  const Primitive b_buffer = opt.state("b")->buffers.at("momentum_buffer");
  // Only w is in this loss: b is not touched, not even re-wrapped, and keeps its state.
  Gradients only_w = toy_backward(toy, 1, /*with_b=*/false);
  EXPECT_EQ(opt.step(toy, only_w, 0.1), 1u);
  EXPECT_EQ(toy.b.primitive(), b_param);
  EXPECT_EQ(values(toy.b.primitive()), b_before);
  EXPECT_EQ(opt.state("b")->step, 1);
  EXPECT_EQ(opt.state("b")->buffers.at("momentum_buffer"), b_buffer);
  EXPECT_EQ(opt.state("w")->step, 2);
  // A module in validation mode has no tracked parameters, so nothing is updated.
  Toy plain = nn::valid(toy);
  EXPECT_EQ(opt.step(plain, only_w, 0.1), 0u);
  EXPECT_EQ(values(plain.w.primitive()), values(toy.w.primitive()));
  EXPECT_EQ(opt.steps(), 3);
}

// Two slots holding one parameter (tied weights): one update, one state, both slots see it.
struct SgdTied {
  nn::Param<1> first;
  nn::Param<1> second;
  KILN_MODULE(first, second)
};

TEST(OptimSgd, UpdatesATiedParameterOnce) {
  SgdTied tied{nn::Param<1>(tensor_of<1>({1.0, -2.0}, Shape{2}, DType::F64)), {}};
  tied = nn::train(tied);
  tied.second = tied.first.val();
  Sgd opt({.momentum = 0.9});
  for (int t = 0; t < 2; ++t) {
    Gradients grads = (tied.first.val() * tied.second.val()).sum().backward();  // d/dθ θ² = 2θ
    EXPECT_EQ(opt.step(tied, grads, 0.1), 1u);
    EXPECT_EQ(tied.first.primitive(), tied.second.primitive());
    // momentum buffer = 2θ₀ at the first step, 0.9 · 2θ₀ + 2θ₁ at the second
    if (t == 0) {
      EXPECT_EQ(values(tied.first.primitive()), (std::vector<double>{0.8, -1.6}));
    }
  }
  EXPECT_EQ(opt.state_names(), std::vector<std::string>{"first"});
  const double b1 = 2.0, theta1 = 0.8, b2 = 0.9 * b1 + 2 * theta1;
  EXPECT_NEAR(values(tied.second.primitive())[0], theta1 - 0.1 * b2, 1e-15);
}

TEST(OptimSgd, RejectsBadSettingsAndRates) {
  EXPECT_THROW(Sgd({.momentum = -0.1}), InvalidArgument);
  EXPECT_THROW(Sgd({.weight_decay = -1}), InvalidArgument);
  EXPECT_THROW(Sgd({.nesterov = true}), InvalidArgument);
  EXPECT_THROW(Sgd({.momentum = 0.9, .dampening = 0.1, .nesterov = true}), InvalidArgument);
  Sgd opt;
  Toy toy = make_toy();
  Gradients grads = toy_backward(toy, 0);
  const std::vector<double> before = theta_of(toy);
  try {
    opt.step(toy, grads, -0.1);
    FAIL() << "a negative learning rate was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("[SGD::step] learning rate -0.1"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(opt.step(toy, grads, std::nan("")), InvalidArgument);
  EXPECT_EQ(theta_of(toy), before);
  EXPECT_EQ(opt.steps(), 0);
}

}  // namespace
}  // namespace kiln::optim
