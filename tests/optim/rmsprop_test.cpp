// RMSprop against a float64 loop of PyTorch's documented algorithm.
#include <kiln/optim/rmsprop.h>

#include "toy_module.h"

namespace kiln::optim {
namespace {

using namespace testing;

// torch.optim.RMSprop's pseudo-code, one element at a time.
struct RmsPropReference {
  explicit RmsPropReference(RmsPropConfig config) : c(config) {}

  RmsPropConfig c;
  std::vector<double> square_avg, grad_avg, buffer;

  void step(std::vector<double>& theta, std::vector<double> g, double lr) {
    square_avg.resize(theta.size());
    grad_avg.resize(theta.size());
    buffer.resize(theta.size());
    for (std::size_t i = 0; i < theta.size(); ++i) {
      if (c.maximize) g[i] = -g[i];
      g[i] += c.weight_decay * theta[i];
      square_avg[i] = c.alpha * square_avg[i] + (1 - c.alpha) * g[i] * g[i];
      double variance = square_avg[i];
      if (c.centered) {
        grad_avg[i] = c.alpha * grad_avg[i] + (1 - c.alpha) * g[i];
        variance -= grad_avg[i] * grad_avg[i];
      }
      const double scaled = g[i] / (std::sqrt(variance) + c.eps);
      if (c.momentum > 0) {
        buffer[i] = c.momentum * buffer[i] + scaled;
        theta[i] -= lr * buffer[i];
      } else {
        theta[i] -= lr * scaled;
      }
    }
  }
};

TEST(OptimRmsProp, FollowsTheDocumentedUpdateForEveryVariant) {
  const std::vector<std::pair<std::string, RmsPropConfig>> cases = {
      {"defaults", {}},
      {"centered", {.alpha = 0.9, .centered = true}},
      {"momentum", {.momentum = 0.9}},
      {"centered, momentum, weight decay",
       {.alpha = 0.8, .eps = 1e-4, .weight_decay = 0.05, .momentum = 0.5, .centered = true}},
      {"maximize", {.alpha = 0.95, .maximize = true}},
  };
  for (const auto& [label, config] : cases) {
    RmsProp opt(config);
    run_against(
        opt, RmsPropReference(config), 7, [](int) { return 0.01; }, label);
    const ParamState* state = opt.state("w");
    ASSERT_NE(state, nullptr) << label;
    EXPECT_TRUE(state->buffers.contains("square_avg")) << label;
    EXPECT_EQ(state->buffers.contains("momentum_buffer"), config.momentum > 0) << label;
    EXPECT_EQ(state->buffers.contains("grad_avg"), config.centered) << label;
  }
}

TEST(OptimRmsProp, RejectsBadSettings) {
  EXPECT_THROW(RmsProp({.alpha = 1.5}), InvalidArgument);
  EXPECT_THROW(RmsProp({.alpha = -0.1}), InvalidArgument);
  EXPECT_THROW(RmsProp({.eps = -1}), InvalidArgument);
  EXPECT_THROW(RmsProp({.weight_decay = -1}), InvalidArgument);
  EXPECT_THROW(RmsProp({.momentum = -0.9}), InvalidArgument);
  RmsProp opt;
  Toy toy = make_toy();
  Gradients grads = toy_backward(toy, 0);
  EXPECT_THROW(opt.step(toy, grads, -0.01), InvalidArgument);
}

}  // namespace
}  // namespace kiln::optim
