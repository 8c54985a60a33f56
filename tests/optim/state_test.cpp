// Optimizer state: export to named host tensors, load into a fresh optimizer, identical steps.
#include <kiln/optim/optim.h>

#include <set>

#include "toy_module.h"

namespace kiln::optim {
namespace {

using namespace testing;
using StateMap = std::map<std::string, TensorData>;

std::set<std::string> keys_of(const StateMap& state) {
  std::set<std::string> keys;
  for (const auto& [key, data] : state) keys.insert(key);
  return keys;
}

// Runs `before` steps, saves, loads into a fresh optimizer made by make(), then checks that both
// copies take bit-identical further steps (scheduled, so the step count must carry over too).
template <class Make>
void check_round_trip(Make make, const std::set<std::string>& expected_keys,
                      const std::string& label) {
  const CosineAnnealingLr schedule{.base_lr = 0.05, .t_max = 6, .eta_min = 0.01};
  auto original = make();
  Toy toy = make_toy();
  for (int t = 0; t < 3; ++t) {
    Gradients grads = toy_backward(toy, t);
    original.step(toy, grads, schedule);
  }
  const StateMap saved = original.state_dict();
  EXPECT_EQ(keys_of(saved), expected_keys) << label;
  EXPECT_EQ(saved.at("w.step").to_vec<std::int64_t>(), std::vector<std::int64_t>{3}) << label;
  EXPECT_EQ(saved.at("optimizer.steps").to_vec<std::int64_t>(), std::vector<std::int64_t>{3});
  for (const auto& [key, data] : saved) {
    if (key.ends_with(".step") || key == kStepsKey) continue;
    EXPECT_EQ(data.dtype(), DType::F64) << key;
    EXPECT_EQ(data.shape(), key.starts_with("w.") ? Shape({2, 3}) : Shape({3})) << key;
  }
  // The exported buffers are the optimizer's values.
  for (const auto& [name, buffer] : original.state("w")->buffers) {
    EXPECT_EQ(saved.at("w." + name).to_f64_vec(), values(buffer)) << label << " " << name;
  }

  auto resumed = make();
  resumed.load_state_dict(toy, saved);
  EXPECT_EQ(resumed.steps(), 3) << label;
  EXPECT_EQ(resumed.state_names(), original.state_names()) << label;
  Toy copy = toy;  // shares values until an optimizer replaces a parameter
  for (int t = 3; t < 6; ++t) {
    Gradients grads = toy_backward(toy, t);
    original.step(toy, grads, schedule);
    Gradients copy_grads = toy_backward(copy, t);
    resumed.step(copy, copy_grads, schedule);
    EXPECT_EQ(theta_of(copy), theta_of(toy)) << label << ", step " << t;
  }
  EXPECT_EQ(keys_of(resumed.state_dict()), expected_keys) << label;
}

std::set<std::string> state_keys(const std::vector<std::string>& fields) {
  std::set<std::string> keys = {"optimizer.steps", "w.step", "b.step"};
  for (const std::string& f : fields) {
    keys.insert("w." + f);
    keys.insert("b." + f);
  }
  return keys;
}

TEST(OptimState, SaveLoadContinuesIdentically) {
  check_round_trip([] { return Sgd({.momentum = 0.9, .nesterov = true}); },
                   state_keys({"momentum_buffer"}), "SGD");
  check_round_trip([] { return Sgd(); }, state_keys({}), "SGD without momentum");
  check_round_trip([] { return Adam({.amsgrad = true}); },
                   state_keys({"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}), "Adam");
  check_round_trip([] { return AdamW(); }, state_keys({"exp_avg", "exp_avg_sq"}), "AdamW");
  check_round_trip([] { return RmsProp({.momentum = 0.5, .centered = true}); },
                   state_keys({"square_avg", "momentum_buffer", "grad_avg"}), "RMSprop");
}

TEST(OptimState, LoadConvertsToTheParametersDtype) {
  Adam original;
  Toy toy = make_toy();
  Gradients grads = toy_backward(toy, 0);
  original.step(toy, grads, 0.01);
  StateMap saved = original.state_dict();
  saved["w.exp_avg"] = saved["w.exp_avg"].convert(DType::F32);
  Adam resumed;
  resumed.load_state_dict(toy, saved);
  const Primitive& m = resumed.state("w")->buffers.at("exp_avg");
  EXPECT_EQ(m->dtype(), DType::F64);
  EXPECT_EQ(m->device(), kCpu);
  expect_near(values(m), saved["w.exp_avg"].to_f64_vec(), 0, "exp_avg");
}

// Every failed load names the problem and leaves the optimizer as it was.
TEST(OptimState, LoadRejectsMismatchedState) {
  Adam original;
  Toy toy = make_toy();
  Gradients grads = toy_backward(toy, 0);
  original.step(toy, grads, 0.01);
  const StateMap saved = original.state_dict();

  Adam target;
  auto message_of = [&](const StateMap& state, auto error_type) -> std::string {
    using Expected = decltype(error_type);
    try {
      target.load_state_dict(toy, state);
    } catch (const Expected& e) {
      return e.what();
    }
    return "no error of the expected type";
  };
  StateMap wrong_shape = saved;
  wrong_shape["w.exp_avg"] = TensorData::from_vec(std::vector<double>(6, 0.0), Shape{3, 2});
  EXPECT_EQ(message_of(wrong_shape, ShapeMismatch("")),
            "[Adam::load_state_dict] entry 'w.exp_avg' has shape [3, 2] but parameter 'w' has "
            "shape [2, 3]");
  StateMap unknown_param = saved;
  unknown_param["head.weight.exp_avg"] = saved.at("w.exp_avg");
  EXPECT_EQ(message_of(unknown_param, InvalidArgument("")),
            "[Adam::load_state_dict] entry 'head.weight.exp_avg' is for 'head.weight', which is "
            "not a trainable parameter of the module");
  StateMap buffer_param = saved;
  buffer_param["stats.step"] = saved.at("w.step");
  EXPECT_NE(message_of(buffer_param, InvalidArgument("")).find("'stats'"), std::string::npos);
  StateMap missing = saved;
  missing.erase("b.exp_avg_sq");
  EXPECT_EQ(message_of(missing, InvalidArgument("")),
            "[Adam::load_state_dict] entry 'b.exp_avg_sq' is missing");
  StateMap no_steps = saved;
  no_steps.erase("optimizer.steps");
  EXPECT_EQ(message_of(no_steps, InvalidArgument("")),
            "[Adam::load_state_dict] entry 'optimizer.steps' is missing");
  StateMap integer_buffer = saved;
  integer_buffer["w.exp_avg"] = TensorData::from_vec(std::vector<std::int32_t>(6, 0), Shape{2, 3});
  EXPECT_NE(message_of(integer_buffer, DTypeMismatch("")).find("must be a float tensor, got i32"),
            std::string::npos);
  StateMap float_count = saved;
  float_count["w.step"] = TensorData::from_vec(std::vector<double>{1.0});
  EXPECT_NE(message_of(float_count, DTypeMismatch("")).find("'w.step' is a count"),
            std::string::npos);
  // Adam's state does not fit SGD with momentum, nor Adam without amsgrad an amsgrad state.
  Sgd sgd({.momentum = 0.9});
  try {
    sgd.load_state_dict(toy, saved);
    ADD_FAILURE() << "SGD accepted Adam's state";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("SGD with these settings keeps no 'exp_avg'"),
              std::string::npos)
        << e.what();
  }
  Adam amsgrad({.amsgrad = true});
  EXPECT_THROW(amsgrad.load_state_dict(toy, saved), InvalidArgument);  // max_exp_avg_sq missing
  EXPECT_TRUE(target.state_names().empty());
  EXPECT_EQ(target.steps(), 0);
  EXPECT_TRUE(amsgrad.state_names().empty());
  // The unmodified state loads.
  target.load_state_dict(toy, saved);
  EXPECT_EQ(target.state_names(), (std::vector<std::string>{"b", "w"}));
}

TEST(OptimState, ResetForgetsEverything) {
  Sgd opt({.momentum = 0.9});
  Toy toy = make_toy();
  Gradients grads = toy_backward(toy, 0);
  opt.step(toy, grads, 0.1);
  opt.reset();
  EXPECT_EQ(opt.steps(), 0);
  EXPECT_TRUE(opt.state_names().empty());
  EXPECT_EQ(keys_of(opt.state_dict()), std::set<std::string>{"optimizer.steps"});
}

}  // namespace
}  // namespace kiln::optim
