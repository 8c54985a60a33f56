// Activation modules against their formulas, Flatten, and Sequential: positional names as
// PyTorch's nn.Sequential, composition, nesting, module functions.
#include <kiln/nn/nn.h>

#include "nn/layer_test_util.h"

namespace kiln::nn {
namespace {

using testing::kCpu;
using Names = std::vector<std::string>;

template <class A, class F>
void expect_elementwise(const A& module, F formula, const char* what) {
  const std::vector<double> x = testing::values(24, 1, -4, 4);
  std::vector<double> want;
  for (double v : x) want.push_back(formula(v));
  testing::expect_near(testing::read(module.forward(testing::tensor<3>(x, {2, 3, 4}))), want, 1e-12,
                       what);
}

TEST(NnActivation, ModulesMatchTheirFormulas) {
  const double pi = 3.14159265358979323846;
  expect_elementwise(
      Relu{}, [](double v) { return std::max(v, 0.0); }, "relu");
  expect_elementwise(
      Gelu{}, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }, "gelu");
  expect_elementwise(
      Gelu{.tanh_approximation = true},
      [pi](double v) {
        return 0.5 * v * (1 + std::tanh(std::sqrt(2 / pi) * (v + 0.044715 * v * v * v)));
      },
      "gelu tanh");
  expect_elementwise(
      Silu{}, [](double v) { return v / (1 + std::exp(-v)); }, "silu");
  expect_elementwise(
      Sigmoid{}, [](double v) { return 1 / (1 + std::exp(-v)); }, "sigmoid");
  expect_elementwise(
      Tanh{}, [](double v) { return std::tanh(v); }, "tanh");
  expect_elementwise(
      LeakyRelu{}, [](double v) { return v > 0 ? v : 0.01 * v; }, "leaky relu");
  expect_elementwise(
      LeakyRelu{0.2}, [](double v) { return v > 0 ? v : 0.2 * v; }, "leaky relu 0.2");
  EXPECT_TRUE(testing::names(Relu{}).empty());
}

TEST(NnActivation, SoftmaxModulesNormaliseAlongTheirDim) {
  const std::vector<double> x = testing::values(12, 2, -3, 3);  // [3, 4]
  auto reference = [&](std::int64_t dim, bool log) {
    std::vector<double> y(12);
    for (std::int64_t outer = 0; outer < (dim == 1 ? 3 : 4); ++outer) {
      auto index = [&](std::int64_t k) { return dim == 1 ? outer * 4 + k : k * 4 + outer; };
      const std::int64_t n = dim == 1 ? 4 : 3;
      double total = 0;
      for (std::int64_t k = 0; k < n; ++k) total += std::exp(x[index(k)]);
      for (std::int64_t k = 0; k < n; ++k) {
        y[index(k)] = log ? x[index(k)] - std::log(total) : std::exp(x[index(k)]) / total;
      }
    }
    return y;
  };
  const Tensor<2> t = testing::tensor<2>(x, {3, 4});
  testing::expect_near(testing::read(Softmax{}.forward(t)), reference(1, false), 1e-12,
                       "softmax -1");
  testing::expect_near(testing::read(Softmax{.dim = 0}.forward(t)), reference(0, false), 1e-12,
                       "softmax 0");
  testing::expect_near(testing::read(LogSoftmax{.dim = 1}.forward(t)), reference(1, true), 1e-12,
                       "log_softmax");
}

TEST(NnSequential, NamesByPositionAndComposes) {
  auto net = Sequential(testing::to_f64(LinearConfig{3, 5}.init(kCpu)), Relu{},
                        testing::to_f64(LinearConfig{5, 2}.init(kCpu)));
  // torch.nn.Sequential(Linear(3, 5), ReLU(), Linear(5, 2)).state_dict()
  EXPECT_EQ(testing::names(net), (Names{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(net.size(), 3u);
  EXPECT_EQ(num_params(net), 3 * 5 + 5 + 5 * 2 + 2);
  const std::vector<double> w1 = testing::param(net, "0.weight"),
                            b1 = testing::param(net, "0.bias");
  const std::vector<double> w2 = testing::param(net, "2.weight"),
                            b2 = testing::param(net, "2.bias");
  const std::vector<double> x = testing::values(4 * 3, 3);
  std::vector<double> want;
  for (int r = 0; r < 4; ++r) {
    double hidden[5];
    for (int o = 0; o < 5; ++o) {
      hidden[o] = b1[o];
      for (int i = 0; i < 3; ++i) hidden[o] += w1[o * 3 + i] * x[r * 3 + i];
      hidden[o] = std::max(hidden[o], 0.0);
    }
    for (int o = 0; o < 2; ++o) {
      double y = b2[o];
      for (int i = 0; i < 5; ++i) y += w2[o * 5 + i] * hidden[i];
      want.push_back(y);
    }
  }
  testing::expect_near(testing::read(net.forward(testing::tensor<2>(x, {4, 3}))), want, 1e-12);
  // Module functions see through it.
  const auto trained = train(net);
  EXPECT_TRUE(trained.get<0>().weight.val().is_require_grad());
  EXPECT_FALSE(valid(trained).get<2>().bias->val().device().is_autodiff());
}

TEST(NnSequential, ChangesRankThroughFlattenAndNests) {
  kCpu.seed(2);
  auto features = Sequential(
      Conv2dConfig{.in_channels = 1, .out_channels = 2, .kernel_size = {3, 3}, .padding = {1, 1}}
          .init(kCpu),
      Relu{}, MaxPool2d{.kernel_size = {2, 2}});
  auto net = Sequential(features, Flatten{}, LinearConfig{2 * 3 * 3, 4}.init(kCpu));
  EXPECT_EQ(testing::names(net), (Names{"0.0.weight", "0.0.bias", "2.weight", "2.bias"}));
  const Tensor<4> x = Tensor<4>::random({5, 1, 6, 6}, Distribution::normal(0, 1), kCpu);
  const Tensor<2> y = net.forward(x);
  EXPECT_EQ(y.shape(), (Shape{5, 4}));
  // The same layers applied one by one.
  const Tensor<4> pooled =
      features.get<2>().forward(activation::relu(features.get<0>().forward(x)));
  const Tensor<2> flat = Flatten{}.forward(pooled);
  EXPECT_EQ(flat.shape(), (Shape{5, 18}));
  EXPECT_EQ(testing::read(y), testing::read(net.get<2>().forward(flat)));
}

struct Classifier {
  Sequential<Linear, Gelu, Linear> body;
  LayerNorm norm;
  KILN_MODULE(body, norm)
};

TEST(NnSequential, IsAMemberLikeAnyModule) {
  Classifier c{Sequential(LinearConfig{4, 8}.init(kCpu), Gelu{}, LinearConfig{8, 3}.init(kCpu)),
               LayerNormConfig{.normalized_size = 3}.init(kCpu)};
  EXPECT_EQ(testing::names(c), (Names{"body.0.weight", "body.0.bias", "body.2.weight",
                                      "body.2.bias", "norm.weight", "norm.bias"}));
}

}  // namespace
}  // namespace kiln::nn
