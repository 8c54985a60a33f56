// Optimizer state belongs to the parameter it was made for: a step on another model under the
// same names, or on a parameter whose shape, dtype or device changed, is refused before anything
// changes, never broadcast into the parameter.
#include <kiln/nn/linear.h>
#include <kiln/optim/optim.h>

#include <functional>
#include <memory>

#include "support/error_message.h"
#include "toy_module.h"

namespace kiln::optim {
namespace {

using namespace testing;

struct Head {
  nn::Linear fc;
  KILN_MODULE(fc)
};

Head make_head(std::int64_t in, std::int64_t out, std::uint64_t seed) {
  kCpu.seed(seed);
  return nn::train(Head{nn::LinearConfig{in, out}.init(kCpu)});
}

Gradients head_backward(const Head& head) {
  const std::int64_t in = head.fc.weight.val().dims()[1];
  const Tensor<2> x = Tensor<2>::ones({2, in}, kCpu).cast(head.fc.weight.val().dtype());
  return (head.fc.forward(x) * head.fc.forward(x)).sum().backward();
}

struct Case {
  std::string label;
  std::function<std::unique_ptr<Optimizer>()> make;
};

// Every stateful optimizer, under settings that give it state buffers, and plain SGD (its state
// is only the step count, which is refused as well: it was made for another parameter).
std::vector<Case> cases() {
  return {
      {"SGD momentum", [] { return std::make_unique<Sgd>(SgdConfig{.momentum = 0.9}); }},
      {"SGD nesterov",
       [] { return std::make_unique<Sgd>(SgdConfig{.momentum = 0.9, .nesterov = true}); }},
      {"SGD", [] { return std::make_unique<Sgd>(); }},
      {"Adam", [] { return std::make_unique<Adam>(); }},
      {"Adam amsgrad", [] { return std::make_unique<Adam>(AdamConfig{.amsgrad = true}); }},
      {"AdamW", [] { return std::make_unique<AdamW>(); }},
      {"RMSprop", [] { return std::make_unique<RmsProp>(); }},
      {"RMSprop centered momentum",
       [] { return std::make_unique<RmsProp>(RmsPropConfig{.momentum = 0.5, .centered = true}); }},
  };
}

std::string message_of(const std::function<void()>& f) {
  return test::message_of<InvalidArgument>(f);
}

// The finding: state made for a Linear(1 -> 4) weight ([4, 1]) stepped on a Linear(4 -> 1)
// ([1, 4]) broadcast to a [4, 4] weight without an error.
TEST(OptimStaleState, AnotherModelUnderTheSameNamesIsRefused) {
  for (const Case& c : cases()) {
    std::unique_ptr<Optimizer> opt = c.make();
    Head first = make_head(1, 4, 1);
    for (int t = 0; t < 2; ++t) opt->step(first, head_backward(first), 0.01);
    const std::map<std::string, TensorData> state_before = opt->state_dict();

    Head second = make_head(4, 1, 2);
    const std::vector<double> weight_before = values(second.fc.weight.primitive());
    const std::vector<double> bias_before = values(second.fc.bias->primitive());
    Gradients grads = head_backward(second);
    const std::string message = message_of([&] { opt->step(second, grads, 0.01); });
    const std::string name(opt->name());
    EXPECT_EQ(message.rfind("[" + name +
                                "::step] parameter 'fc.weight' has shape [1, 4] but the "
                                "optimizer's state for it was made for [4, 1]",
                            0),
              0u)
        << c.label << ": " << message;
    EXPECT_NE(message.find("reset()"), std::string::npos) << c.label << ": " << message;
    // Nothing changed: the other model, the state, the step count.
    EXPECT_EQ(second.fc.weight.val().shape(), Shape({1, 4})) << c.label;
    EXPECT_EQ(values(second.fc.weight.primitive()), weight_before) << c.label;
    EXPECT_EQ(values(second.fc.bias->primitive()), bias_before) << c.label;
    EXPECT_EQ(opt->steps(), 2) << c.label;
    const std::map<std::string, TensorData> state_after = opt->state_dict();
    ASSERT_EQ(state_after.size(), state_before.size()) << c.label;
    for (const auto& [key, data] : state_before) {
      EXPECT_EQ(state_after.at(key).shape(), data.shape()) << c.label << " " << key;
      EXPECT_EQ(state_after.at(key).to_f64_vec(), data.to_f64_vec()) << c.label << " " << key;
    }
    // The model the state belongs to still steps; after reset() the other one does too.
    EXPECT_EQ(opt->step(first, head_backward(first), 0.01), 2u) << c.label;
    opt->reset();
    EXPECT_EQ(opt->step(second, head_backward(second), 0.01), 2u) << c.label;
    EXPECT_EQ(second.fc.weight.val().shape(), Shape({1, 4})) << c.label;
  }
}

// A refusal on a later parameter leaves the earlier ones unchanged too: the checks run first.
TEST(OptimStaleState, ARefusedStepChangesNoParameter) {
  struct Two {
    nn::Linear a, b;
    KILN_MODULE(a, b)
  };
  Adam opt;
  kCpu.seed(4);
  Two first = nn::train(Two{nn::LinearConfig{2, 2}.init(kCpu), nn::LinearConfig{3, 2}.init(kCpu)});
  auto backward = [](const Two& m) {
    return (m.a.forward(Tensor<2>::ones({1, 2}, kCpu)).sum() +
            m.b.forward(Tensor<2>::ones({1, m.b.weight.val().dims()[1]}, kCpu)).sum())
        .backward();
  };
  opt.step(first, backward(first), 0.1);
  Two second = first;
  second.b = nn::train(nn::LinearConfig{2, 3}.init(kCpu));  // b rebuilt at another size
  const std::vector<double> a_before = values(second.a.weight.primitive());
  const std::string message = message_of([&] { opt.step(second, backward(second), 0.1); });
  EXPECT_NE(message.find("parameter 'b.weight' has shape [3, 2] but the optimizer's state for it "
                         "was made for [2, 3]"),
            std::string::npos)
      << message;
  EXPECT_EQ(values(second.a.weight.primitive()), a_before);
  EXPECT_EQ(opt.state("a.weight")->step, 1);
}

// A module cast after some steps: its state was made for f32. load_state_dict carries the state
// over (converting it), and the f64 steps then continue the f32 trajectory.
TEST(OptimStaleState, ACastParameterIsRefusedUntilTheStateIsCarriedOver) {
  Adam opt;
  Toy toy = make_toy(DType::F32);
  for (int t = 0; t < 2; ++t) opt.step(toy, toy_backward(toy, t), 0.01);
  Adam f32_opt = opt;
  Toy f32_toy = toy;
  Toy wide = nn::cast(toy, DType::F64);
  const std::string message = message_of([&] { opt.step(wide, toy_backward(wide, 2), 0.01); });
  EXPECT_NE(message.find("[Adam::step] parameter 'w' is f64 but the optimizer's state for it was "
                         "made for f32"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("load_state_dict(module, state_dict())"), std::string::npos) << message;
  EXPECT_EQ(values(wide.w.primitive()), values(toy.w.primitive()));

  opt.load_state_dict(wide, opt.state_dict());
  EXPECT_EQ(opt.state("w")->dtype, DType::F64);
  EXPECT_EQ(opt.state("w")->buffers.at("exp_avg")->dtype(), DType::F64);
  EXPECT_EQ(opt.step(wide, toy_backward(wide, 2), 0.01), 2u);
  EXPECT_EQ(f32_opt.step(f32_toy, toy_backward(f32_toy, 2), 0.01), 2u);
  expect_near(theta_of(wide), theta_of(f32_toy), 1e-6, "carried over");
  // Starting afresh instead gives another step: the comparison above can tell them apart.
  Adam fresh;
  Toy wide_fresh = nn::cast(toy, DType::F64);
  fresh.step(wide_fresh, toy_backward(wide_fresh, 2), 0.01);
  double largest = 0;
  const std::vector<double> a = theta_of(wide_fresh), b = theta_of(wide);
  for (std::size_t i = 0; i < a.size(); ++i) largest = std::max(largest, std::abs(a[i] - b[i]));
  EXPECT_GT(largest, 1e-4);
}

// The legitimate paths: the same model many times, copies and mode changes of it, a checkpoint
// of its state loaded into a fresh optimizer.
TEST(OptimStaleState, TheSameModelStepsOnThroughCopiesModesAndCheckpoints) {
  Adam opt;
  Toy toy = make_toy();
  for (int t = 0; t < 50; ++t) ASSERT_EQ(opt.step(toy, toy_backward(toy, t), 0.001), 2u);
  EXPECT_EQ(opt.state("w")->step, 50);
  EXPECT_EQ(opt.state("w")->shape, Shape({2, 3}));
  EXPECT_EQ(opt.state("w")->device, kCpu);  // the plain device, though w lives on autodiff
  Toy again = nn::train(nn::valid(toy));    // out of training mode and back
  EXPECT_EQ(opt.step(again, toy_backward(again, 50), 0.001), 2u);
  Toy moved = nn::to_device(again, kCpu);
  EXPECT_EQ(opt.step(moved, toy_backward(moved, 51), 0.001), 2u);

  Adam resumed;
  resumed.load_state_dict(moved, opt.state_dict());
  EXPECT_EQ(resumed.state("b")->shape, Shape({3}));
  EXPECT_EQ(resumed.state("b")->dtype, DType::F64);
  Toy copy = moved;
  opt.step(moved, toy_backward(moved, 52), 0.001);
  resumed.step(copy, toy_backward(copy, 52), 0.001);
  EXPECT_EQ(theta_of(copy), theta_of(moved));
}

// Loaded state is bound to the module it was checked against: another model is refused at the
// load (shapes), and at the step if the state was loaded for one model and stepped on another.
TEST(OptimStaleState, LoadedStateIsCheckedAtTheLoadAndAtTheStep) {
  Sgd source({.momentum = 0.9});
  Head first = make_head(1, 4, 5);
  source.step(first, head_backward(first), 0.1);
  const std::map<std::string, TensorData> saved = source.state_dict();

  Head second = make_head(4, 1, 6);
  Sgd target({.momentum = 0.9});
  EXPECT_THROW(target.load_state_dict(second, saved), ShapeMismatch);
  EXPECT_TRUE(target.state_names().empty());

  target.load_state_dict(first, saved);
  const std::string message = message_of([&] { target.step(second, head_backward(second), 0.1); });
  EXPECT_NE(message.find("'fc.weight' has shape [1, 4] but the optimizer's state for it was made "
                         "for [4, 1]"),
            std::string::npos)
      << message;
  EXPECT_EQ(second.fc.weight.val().shape(), Shape({1, 4}));
}

}  // namespace
}  // namespace kiln::optim
