// The module system: member visiting with dotted names, modes, moving, counting, printing.
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/nn/linear.h>

#include <cmath>

#include "support/devices.h"

namespace kiln::nn {
namespace {

using kiln::test::kCpu;

struct Block {
  Linear fc1, fc2;
  Buffer<1> running;  // a buffer: saved and moved, never trained
  KILN_MODULE(fc1, fc2, running)
};

struct Net {
  std::vector<Block> layers;
  std::optional<Linear> head;
  KILN_MODULE(layers, head)
};

Net make_net() {
  Net net;
  for (int i = 0; i < 2; ++i) {
    Block b{LinearConfig{4, 3}.init(kCpu), LinearConfig{3, 2, false}.init(kCpu),
            Buffer<1>(Tensor<1>::zeros({2}, kCpu))};
    net.layers.push_back(b);
  }
  net.head = LinearConfig{2, 1}.init(kCpu);
  return net;
}

TEST(Module, VisitsMembersWithDottedNamesInOrder) {
  const Net net = make_net();
  std::vector<std::string> names;
  for (const NamedParam& p : named_parameters(net)) names.push_back(p.name);
  const std::vector<std::string> expected = {
      "layers.0.fc1.weight", "layers.0.fc1.bias", "layers.0.fc2.weight", "layers.0.running",
      "layers.1.fc1.weight", "layers.1.fc1.bias", "layers.1.fc2.weight", "layers.1.running",
      "head.weight",         "head.bias"};
  EXPECT_EQ(names, expected);
  // 2 * (4*3 + 3 + 3*2) + 2 + 1 trainable scalars; buffers are not counted.
  EXPECT_EQ(num_params(net), 2 * (12 + 3 + 6) + 3);
}

TEST(Module, TrainTracksTrainableParametersAndValidLeavesAutodiff) {
  Net net = train(make_net());
  for (const NamedParam& p : named_parameters(net)) {
    EXPECT_TRUE(p.value->device().is_autodiff()) << p.name;
    EXPECT_EQ(kiln::detail::is_require_grad(p.value), p.trainable) << p.name;
  }
  Net plain = valid(net);
  for (const NamedParam& p : named_parameters(plain)) {
    EXPECT_EQ(p.value->device(), kCpu) << p.name;
    EXPECT_FALSE(kiln::detail::is_require_grad(p.value)) << p.name;
  }
  // The original is a separate value: still training.
  EXPECT_TRUE(named_parameters(net).front().value->device().is_autodiff());
  // fork keeps the mode.
  Net forked = fork(net, kCpu);
  EXPECT_TRUE(kiln::detail::is_require_grad(named_parameters(forked).front().value));
}

TEST(Module, LinearMatchesItsDefinitionAndGetsGradients) {
  Linear layer = train(LinearConfig{3, 2}.init(kCpu));
  const std::vector<double> w = layer.weight.val().into_data().to_f64_vec();  // [2, 3]
  const std::vector<double> b = layer.bias->val().into_data().to_f64_vec();
  auto x = Tensor<2>::from_data(
      TensorData::from_vec(std::vector<float>{1, -2, 0.5f, 3, 1, -1}, {2, 3}), kCpu);
  auto y = layer.forward(x);
  const std::vector<double> got = y.into_data().to_f64_vec();
  const double xs[2][3] = {{1, -2, 0.5}, {3, 1, -1}};
  for (int i = 0; i < 2; ++i) {
    for (int o = 0; o < 2; ++o) {
      double ref = b[o];
      for (int k = 0; k < 3; ++k) ref += xs[i][k] * w[o * 3 + k];
      EXPECT_NEAR(got[i * 2 + o], ref, 1e-5);
    }
  }
  Gradients g = y.sum().backward();
  // d sum / d W[o][k] = sum_i x[i][k]; d sum / d b[o] = batch size.
  const std::vector<double> dw = layer.weight.val().grad(g)->into_data().to_f64_vec();
  for (int o = 0; o < 2; ++o) {
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(dw[o * 3 + k], xs[0][k] + xs[1][k], 1e-5);
  }
  for (double v : layer.bias->val().grad(g)->into_data().to_f64_vec()) EXPECT_NEAR(v, 2.0, 1e-6);
}

TEST(Module, InitializersFollowTheirBounds) {
  kCpu.seed(3);
  const Linear layer = LinearConfig{100, 50}.init(kCpu);
  const double bound = 1.0 / std::sqrt(100.0);
  double max_abs = 0;
  for (double v : layer.weight.val().into_data().to_f64_vec())
    max_abs = std::max(max_abs, std::abs(v));
  EXPECT_LE(max_abs, bound);
  EXPECT_GT(max_abs, 0.9 * bound);  // 5000 draws reach the edge
  auto xavier = Initializer::xavier_normal().init<2>(Shape{200, 300}, kCpu);
  const std::vector<double> v = xavier.into_data().to_f64_vec();
  double sq = 0;
  for (double x : v) sq += x * x;
  EXPECT_NEAR(std::sqrt(sq / v.size()), std::sqrt(2.0 / 500.0), 0.003);
  EXPECT_THROW(LinearConfig({0, 3}).init(kCpu), InvalidArgument);
  EXPECT_THROW(Initializer::uniform(1, -1).init<1>(Shape{3}, kCpu), InvalidArgument);
}

TEST(Module, SettingAParameterChecksRankAndKind) {
  Linear layer = LinearConfig{3, 2}.init(kCpu);
  EXPECT_THROW(layer.weight.set_primitive(Tensor<1>::zeros({3}, kCpu).primitive()), ShapeMismatch);
  EXPECT_THROW(layer.weight.set_primitive(Tensor<2, Int>::zeros({2, 3}, kCpu).primitive()),
               DTypeMismatch);
  const std::string text = describe(layer, "Linear");
  EXPECT_NE(text.find("weight: [2, 3] f32 on cpu"), std::string::npos) << text;
  EXPECT_NE(text.find("8 trainable parameters"), std::string::npos) << text;
}

}  // namespace
}  // namespace kiln::nn
