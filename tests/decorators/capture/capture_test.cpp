// capture() and Graph::replay on the CPU (kiln/graph.h), and Tensor::assign: replays against the
// same ops run eagerly on the same values (bit for bit), a training step replayed against eager
// steps, random interleavings of eager ops, assigns and replays, memory over many replays, and
// every refusal.
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/module_ops.h>

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>

#include "contract/op_code.h"
#include "decorators/capture/capture_backend.h"
#include "runtime/registry.h"

namespace kiln {
namespace {

std::vector<float> random_floats(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> out(n);
  for (float& v : out) v = normal(rng);
  return out;
}

Tensor<2> random_tensor(std::int64_t rows, std::int64_t cols, std::uint64_t seed,
                        const Device& device) {
  return Tensor<2>::from_data(
      TensorData::from_vec(random_floats(static_cast<std::size_t>(rows * cols), seed),
                           {rows, cols}),
      device);
}

bool same_bits(const Tensor<2>& a, const Tensor<2>& b) {
  const TensorData x = a.into_data();
  const TensorData y = b.into_data();
  return x.shape() == y.shape() && x.dtype() == y.dtype() && x.bytes().size() == y.bytes().size() &&
         std::memcmp(x.bytes().data(), y.bytes().data(), x.bytes().size()) == 0;
}

// A region with a product, broadcasting, a reduction along a dim and a view of an input.
Tensor<2> region_ops(const Tensor<2>& x, const Tensor<2>& w, const Tensor<2>& b) {
  Tensor<2> h = (x.matmul(w) + b).tanh();
  Tensor<2> s = activation::softmax(h, 1) * 3.0 - h.sum_dim(1);
  return s + x.slice({Slice(), Slice(0, 4)}).exp().matmul(w.slice({Slice(0, 4), Slice()}));
}

std::vector<Device> cpu_flavours() {
  const Device cpu = Device::cpu();
  return {cpu, cpu.fused(), cpu.autodiff(), cpu.fused().autodiff()};
}

TEST(Capture, ReplayMatchesTheOpsRunEagerlyOnTheNewValues) {
  for (const Device& device : cpu_flavours()) {
    SCOPED_TRACE(device.to_string());
    // x is a transposed view: the region reads an input through its strides.
    Tensor<2> x = random_tensor(24, 70, 1, device).transpose();
    const Tensor<2> w = random_tensor(24, 9, 2, device);
    const Tensor<2> b = random_tensor(1, 9, 3, device);
    Tensor<2> y;
    const Graph graph = capture(device, [&] { y = region_ops(x, w, b); });
    EXPECT_FALSE(graph.on_device());
    EXPECT_GE(graph.node_count(), 8u);
    EXPECT_TRUE(same_bits(y, region_ops(x, w, b)));
    const Tensor<2> held = y;  // a second handle on the output sees the replays too
    for (std::uint64_t round = 0; round < 3; ++round) {
      const Tensor<2> next = random_tensor(70, 24, 10 + round, device);
      x.assign(next);
      graph.replay();
      const Tensor<2> eager = region_ops(next, w, b);
      EXPECT_TRUE(same_bits(y, eager)) << "round " << round;
      EXPECT_TRUE(same_bits(held, eager));
    }
  }
}

TEST(Capture, EmptyShapesAndNonFiniteValuesReplay) {
  const Device device = Device::cpu();
  Tensor<2> x = Tensor<2>::zeros({0, 5}, device);
  Tensor<2> y;
  Graph empty_graph = capture(device, [&] { y = (x * 2.0).exp(); });
  empty_graph.replay();
  EXPECT_EQ(y.shape(), Shape({0, 5}));

  Tensor<2> z =
      Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{1, 2, 3, 4}, {2, 2}), device);
  Graph graph = capture(device, [&] { y = z.log().max_dim(1); });
  const float inf = std::numeric_limits<float>::infinity();
  z.assign(Tensor<2>::from_data(
      TensorData::from_vec(std::vector<float>{-1, 0, inf, std::nanf("")}, {2, 2}), device));
  graph.replay();
  const std::vector<float> got = y.into_data().to_vec<float>();
  EXPECT_TRUE(std::isnan(got[0]));  // max(log(-1), log(0)) = max(NaN, -inf) = NaN
  EXPECT_TRUE(std::isnan(got[1]));  // max(inf, NaN) = NaN (NaN propagates)
}

// One hidden layer, SGD with momentum and weight decay, MSE loss.
struct Mlp {
  nn::Linear first, second;
  KILN_MODULE(first, second)
  Tensor<2> forward(const Tensor<2>& x) const {
    return second.forward(activation::relu(first.forward(x)));
  }
};

Mlp make_mlp(const Device& device) {
  device.seed(7);
  return nn::train(
      Mlp{nn::LinearConfig{12, 16}.init(device), nn::LinearConfig{16, 3}.init(device)});
}

TEST(Capture, AReplayedTrainingStepTrainsAsEagerStepsDo) {
  for (const Device& plain : {Device::cpu(), Device::cpu().fused()}) {
    SCOPED_TRACE(plain.to_string());
    const Device device = plain.autodiff();
    Mlp eager = make_mlp(device), captured = make_mlp(device);
    const optim::SgdConfig config{.momentum = 0.9, .weight_decay = 0.01};
    optim::Sgd eager_opt(config), captured_opt(config);
    auto step = [](Mlp& model, optim::Sgd& opt, const Tensor<2>& x, const Tensor<2>& target) {
      Tensor<1> loss = nn::mse_loss(model.forward(x), target);
      opt.step(model, loss.backward(), 0.05);
      return loss;
    };
    const auto batch = [&](int i) { return random_tensor(8, 12, 100 + i, plain); };
    const auto target = [&](int i) { return random_tensor(8, 3, 200 + i, plain); };

    // The first step makes the momentum buffers: eager on both.
    step(eager, eager_opt, batch(0), target(0));
    step(captured, captured_opt, batch(0), target(0));
    Tensor<2> x = batch(1);
    Tensor<2> t = target(1);
    Tensor<1> loss;
    const Graph graph = capture(device, [&] { loss = step(captured, captured_opt, x, t); });
    Tensor<1> eager_loss = step(eager, eager_opt, batch(1), target(1));
    for (int i = 2; i < 12; ++i) {
      x.assign(batch(i));
      t.assign(target(i));
      graph.replay();
      eager_loss = step(eager, eager_opt, batch(i), target(i));
      EXPECT_EQ(loss.into_scalar<float>(), eager_loss.into_scalar<float>()) << "step " << i;
    }
    EXPECT_TRUE(same_bits(captured.first.weight.val().inner(), eager.first.weight.val().inner()));
    EXPECT_TRUE(same_bits(captured.second.weight.val().inner(), eager.second.weight.val().inner()));
  }
}

// Adam's bias corrections and a schedule's learning rate change every step: each replay takes
// them afresh, and advances the step counts as an eager step does.
TEST(Capture, ReplayedAdamStepsUnderAScheduleFollowEagerSteps) {
  for (const bool decoupled : {false, true}) {
    SCOPED_TRACE(decoupled ? "AdamW" : "Adam");
    const Device device = Device::cpu().autodiff();
    Mlp eager = make_mlp(device), captured = make_mlp(device);
    const optim::CosineAnnealingLr schedule{.base_lr = 0.05, .t_max = 20, .eta_min = 0.001};
    std::unique_ptr<optim::Optimizer> eager_opt, captured_opt;
    if (decoupled) {
      eager_opt = std::make_unique<optim::AdamW>(optim::AdamWConfig{.weight_decay = 0.1});
      captured_opt = std::make_unique<optim::AdamW>(optim::AdamWConfig{.weight_decay = 0.1});
    } else {
      eager_opt = std::make_unique<optim::Adam>(optim::AdamConfig{.amsgrad = true});
      captured_opt = std::make_unique<optim::Adam>(optim::AdamConfig{.amsgrad = true});
    }
    auto step = [&](Mlp& model, optim::Optimizer& opt, const Tensor<2>& x, const Tensor<2>& t) {
      Tensor<1> loss = nn::mse_loss(model.forward(x), t);
      opt.step(model, loss.backward(), schedule);
      return loss;
    };
    const auto batch = [&](int i) { return random_tensor(8, 12, 300 + i, Device::cpu()); };
    const auto target = [&](int i) { return random_tensor(8, 3, 400 + i, Device::cpu()); };
    step(eager, *eager_opt, batch(0), target(0));
    step(captured, *captured_opt, batch(0), target(0));
    Tensor<2> x = batch(1);
    Tensor<2> t = target(1);
    Tensor<1> loss;
    const Graph graph = capture(device, [&] { loss = step(captured, *captured_opt, x, t); });
    step(eager, *eager_opt, batch(1), target(1));
    for (int i = 2; i < 15; ++i) {
      x.assign(batch(i));
      t.assign(target(i));
      graph.replay();
      const Tensor<1> eager_loss = step(eager, *eager_opt, batch(i), target(i));
      EXPECT_NEAR(loss.into_scalar<float>(), eager_loss.into_scalar<float>(), 1e-5) << "step " << i;
    }
    EXPECT_EQ(captured_opt->steps(), eager_opt->steps());
    EXPECT_EQ(captured_opt->state("first.weight")->step, eager_opt->state("first.weight")->step);
    const std::vector<float> a = captured.first.weight.val().into_data().to_vec<float>();
    const std::vector<float> b = eager.first.weight.val().into_data().to_vec<float>();
    for (std::size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k], b[k], 1e-5) << k;
  }
}

// While a graph lives, eager optimizer steps write in place: a step on a batch of another shape
// between replays keeps the graph training the module's own tensors.
TEST(Capture, EagerStepsBetweenReplaysKeepTheGraphOnTheModulesTensors) {
  const Device device = Device::cpu().autodiff();
  Mlp eager = make_mlp(device), captured = make_mlp(device);
  optim::Sgd eager_opt({.momentum = 0.9}), captured_opt({.momentum = 0.9});
  auto step = [](Mlp& model, optim::Sgd& opt, const Tensor<2>& x, const Tensor<2>& t) {
    Tensor<1> loss = nn::mse_loss(model.forward(x), t);
    opt.step(model, loss.backward(), 0.05);
    return loss;
  };
  step(eager, eager_opt, random_tensor(8, 12, 1, Device::cpu()),
       random_tensor(8, 3, 2, Device::cpu()));
  step(captured, captured_opt, random_tensor(8, 12, 1, Device::cpu()),
       random_tensor(8, 3, 2, Device::cpu()));
  Tensor<2> x = random_tensor(8, 12, 3, Device::cpu());
  Tensor<2> t = random_tensor(8, 3, 4, Device::cpu());
  Tensor<1> loss;
  const Graph graph = capture(device, [&] { loss = step(captured, captured_opt, x, t); });
  step(eager, eager_opt, x, t);
  for (int i = 0; i < 6; ++i) {
    const Tensor<2> xi = random_tensor(8, 12, 10 + i, Device::cpu());
    const Tensor<2> ti = random_tensor(8, 3, 20 + i, Device::cpu());
    if (i % 2 == 0) {  // an odd batch size: eager on both
      const Tensor<2> small = random_tensor(5, 12, 30 + i, Device::cpu());
      const Tensor<2> small_t = random_tensor(5, 3, 40 + i, Device::cpu());
      step(eager, eager_opt, small, small_t);
      step(captured, captured_opt, small, small_t);
    }
    x.assign(xi);
    t.assign(ti);
    graph.replay();
    EXPECT_EQ(loss.into_scalar<float>(), step(eager, eager_opt, xi, ti).into_scalar<float>()) << i;
  }
  EXPECT_TRUE(same_bits(captured.first.weight.val().inner(), eager.first.weight.val().inner()));
}

// The learner captures the training step once a batch shape comes again and replays it: the
// history equals an eager run's, and it says so.
TEST(Capture, TheLearnerReplaysItsTrainingStepAsEagerStepsWouldRun) {
  auto run = [](bool capture_step, std::ostream& out) {
    const Device device = Device::cpu();
    device.seed(3);
    std::vector<data::ClassificationItem> items;
    for (int i = 0; i < 90; ++i) {  // 90 items in batches of 16: a last batch of 10
      items.push_back({random_floats(12, 1000 + static_cast<std::uint64_t>(i)), i % 3});
    }
    const auto dataset = data::in_memory(std::move(items));
    const data::ClassificationBatcher batcher(device);
    const data::ClassificationLoader loader(dataset, batcher, {.batch_size = 16, .shuffle = true});
    Mlp model = make_mlp(device);
    optim::AdamW optimizer;
    const optim::CosineAnnealingLr schedule{.base_lr = 0.01, .t_max = 24};
    auto classify = [](const Mlp& m, const data::ClassificationBatch& b) {
      const Tensor<2> logits = m.forward(b.features);
      return train::classification_step(nn::cross_entropy(logits, b.labels), logits, b.labels);
    };
    train::History history;
    train::fit(model, optimizer, schedule, loader, &loader, classify,
               {.epochs = 4,
                .capture = capture_step,
                .progress = train::Progress::Style::Quiet,
                .out = &out},
               &history);
    return history;
  };
  std::ostringstream eager_out, captured_out;
  const train::History eager = run(false, eager_out);
  const train::History captured = run(true, captured_out);
  EXPECT_NE(captured_out.str().find("the training step is captured"), std::string::npos)
      << captured_out.str();
  ASSERT_EQ(eager.records().size(), captured.records().size());
  for (std::size_t e = 0; e < eager.records().size(); ++e) {
    EXPECT_EQ(eager.records()[e].train_loss, captured.records()[e].train_loss) << e;
    EXPECT_EQ(eager.records()[e].train_accuracy, captured.records()[e].train_accuracy) << e;
    EXPECT_EQ(eager.records()[e].valid_loss, captured.records()[e].valid_loss) << e;
  }
}

TEST(Capture, OptimizersRefuseWhatAReplayCannotRepeat) {
  const Device device = Device::cpu().autodiff();
  Mlp model = make_mlp(device);
  const Tensor<2> x = random_tensor(4, 12, 1, Device::cpu());
  const Tensor<2> t = random_tensor(4, 3, 2, Device::cpu());
  optim::Sgd sgd({.momentum = 0.5});
  try {
    capture(device, [&] { sgd.step(model, nn::mse_loss(model.forward(x), t).backward(), 0.1); });
    FAIL() << "a first momentum step was captured";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("momentum_buffer"), std::string::npos) << e.what();
  }
  optim::Adam adam;
  EXPECT_THROW(
      capture(device, [&] { adam.step(model, nn::mse_loss(model.forward(x), t).backward(), 0.1); }),
      InvalidArgument);
  EXPECT_EQ(adam.steps(), 0);
  // Plain SGD has no state: its first step can be captured.
  optim::Sgd plain_sgd;
  EXPECT_NO_THROW(capture(
      device, [&] { plain_sgd.step(model, nn::mse_loss(model.forward(x), t).backward(), 0.1); }));
}

void expect_refused(const std::function<void()>& region, const std::string& op) {
  try {
    capture(Device::cpu(), region);
    FAIL() << op << " was captured";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[" + op + "]"), std::string::npos) << what;
    EXPECT_NE(what.find("cannot be captured"), std::string::npos) << what;
  }
}

TEST(Capture, WhatAReplayCannotRepeatIsRefusedNamingTheOp) {
  const Device cpu = Device::cpu();
  const Tensor<2> x = random_tensor(3, 4, 1, cpu);
  expect_refused([&] { (void)(x * 2.0).into_data(); }, "into_data");
  expect_refused([&] { (void)x.sum().into_scalar<float>(); }, "into_data");
  expect_refused([&] { (void)x.greater_elem(0.0).argwhere(); }, "argwhere");
  expect_refused([&] { (void)x.mask_select(x.greater_elem(0.0)); }, "mask_select");
  // Nesting, an empty region, an empty graph.
  EXPECT_THROW(capture(cpu, [&] { capture(cpu, [&] { (void)(x + 1.0); }); }), InvalidArgument);
  EXPECT_THROW(capture(cpu, std::function<void()>()), InvalidArgument);
  EXPECT_THROW(Graph().replay(), InvalidArgument);
  // A failed capture leaves the thread able to capture again.
  Tensor<2> y;
  const Graph graph = capture(cpu, [&] { y = x + 1.0; });
  graph.replay();
  EXPECT_TRUE(same_bits(y, x + 1.0));
  // A replay inside a capture is refused.
  EXPECT_THROW(capture(cpu, [&] { graph.replay(); }), InvalidArgument);
}

// Every op that ops.def marks R (moves values to the host or another device) or V (a result
// shaped by the values) is refused when it reaches the hardware inside a region: each is called
// on the CPU backend directly (to_device between devices cannot happen on a machine with one),
// and a new R or V op fails here until it has a case.
TEST(Capture, EveryOpOpsDefMarksUncapturableIsRefused) {
  const Device cpu = Device::cpu();
  const Tensor<2> x = random_tensor(3, 4, 2, cpu);
  const Primitive mask = x.greater_elem(0.0).primitive();
  Backend& backend = backend_for(cpu);
  const ProcessGroup alone = ProcessGroup::single(cpu);
  // send and recv on a group of one run into the missing peer, which is their running.
  const auto without_peer = [](std::function<void()> run) {
    return [run] {
      try {
        run();
      } catch (const InvalidArgument& e) {
        if (std::string(e.what()).find("no other rank") == std::string::npos) throw;
      }
    };
  };
  const std::map<std::string, std::function<void()>> cases = {
      {"into_data", [&] { (void)backend.into_data(x.primitive()).get(); }},
      {"read_many",
       [&] {
         (void)backend.read_many({x.primitive(), mask}).get();
       }},
      {"to_device", [&] { (void)backend.to_device(x.primitive(), cpu); }},
      {"argwhere", [&] { (void)backend.argwhere(mask, DType::I64); }},
      {"mask_select", [&] { (void)backend.mask_select(x.primitive(), mask); }},
      // The collectives, on a group of one (outside a region they return their input).
      {"all_reduce", [&] { (void)backend.all_reduce(x.primitive(), ReduceOperation::Sum, alone); }},
      {"broadcast_from", [&] { (void)backend.broadcast_from(x.primitive(), 0, alone); }},
      {"all_gather", [&] { (void)backend.all_gather(x.primitive(), alone); }},
      {"reduce_scatter",
       [&] { (void)backend.reduce_scatter(x.primitive(), ReduceOperation::Max, alone); }},
      {"send", without_peer([&] { (void)backend.send(x.primitive(), 1, alone); })},
      {"recv", without_peer([&] { (void)backend.recv({2}, DType::F32, cpu, 1, alone); })},
  };
  std::size_t marked = 0;
  for (const OpInfo& op : all_ops()) {
    if (!op.host_transfer && !op.value_shape) continue;
    ++marked;
    const auto it = cases.find(std::string(op.name));
    ASSERT_NE(it, cases.end()) << op.name << " has R or V in ops.def but no case here";
    expect_refused(it->second, std::string(op.name));
  }
  EXPECT_EQ(marked, cases.size()) << "a case here names an op without R or V in ops.def";
  // The same ops outside a region run.
  for (const auto& [name, run] : cases) EXPECT_NO_THROW(run()) << name;
}

// The fusion decorator's queue forgets values nobody holds every 64 records or so; a region whose
// last op is such a record must still record it (it once was forgotten: the graph was empty and
// a replay left the result as it was).
TEST(Capture, ARegionEndingWhereTheFusionQueueIsPurgedRecordsItsLastOp) {
  const Device fused = Device::cpu().fused();
  const auto filled = [&](float value) {
    return Tensor<1>::from_data(TensorData::from_vec(std::vector<float>(1 << 16, value), {1 << 16}),
                                fused);
  };
  for (const int ops : {1, 63, 64, 65, 127, 128, 129, 200}) {
    SCOPED_TRACE(ops);
    Tensor<1> x = filled(0.0f);
    Tensor<1> y;
    const Graph graph = capture(fused, [&] {
      Tensor<1> t = x;
      for (int i = 0; i < ops; ++i) t = t + 1.0;
      y = t;
    });
    EXPECT_GT(graph.node_count(), 0u);
    for (const float start : {3.0f, 10.0f}) {
      x.assign(filled(start));
      graph.replay();
      const std::vector<float> got = y.into_data().to_vec<float>();
      EXPECT_EQ(got.front(), start + static_cast<float>(ops));
      EXPECT_EQ(got.back(), start + static_cast<float>(ops));
    }
  }
}

// The region's result after capture and after three replays equals what eager calls in the same
// order give from the same seed, and the replays drew other numbers than the capture.
void expect_fresh_draws_each_replay(const Device& device, std::uint64_t seed,
                                    const std::function<Tensor<2>()>& region) {
  device.seed(seed);
  Tensor<2> y;
  const Graph graph = capture(device, [&] { y = region(); });
  std::vector<Tensor<2>> replayed;
  replayed.push_back(Tensor<2>::from_data(y.into_data(), Device::cpu()));
  for (int i = 0; i < 3; ++i) {
    graph.replay();
    replayed.push_back(Tensor<2>::from_data(y.into_data(), Device::cpu()));
  }
  device.seed(seed);
  for (std::size_t i = 0; i < replayed.size(); ++i) {
    EXPECT_TRUE(same_bits(replayed[i], Tensor<2>::from_data(region().into_data(), Device::cpu())))
        << "run " << i;
  }
  EXPECT_FALSE(same_bits(replayed[0], replayed[1]));
}

// Random numbers inside a region are drawn afresh before each replay, from the device's stream in
// the order eager steps would draw them (plain, and fused, where random would otherwise fuse).
TEST(Capture, RandomValuesAreDrawnAfreshForEachReplay) {
  for (const Device& device : cpu_flavours()) {
    SCOPED_TRACE(device.to_string());
    const Tensor<2> x = random_tensor(64, 80, 1, device);
    expect_fresh_draws_each_replay(device, 11, [&] {
      const Tensor<2> keep = Tensor<2>::random({64, 80}, Distribution::uniform(0, 1), device);
      return x * keep.greater_elem(0.3).float_() +
             Tensor<2>::random({64, 80}, Distribution::normal(0, 1), device);
    });
  }
}

// Attention's dropout seed is a random draw too: each replay drops other weights, the ones the
// eager calls in the same order would drop.
TEST(Capture, AttentionDropoutMasksAreDrawnAfreshForEachReplay) {
  for (const Device& device : cpu_flavours()) {
    SCOPED_TRACE(device.to_string());
    const Tensor<4> q = random_tensor(16, 8, 1, device).reshape<4>(Shape{1, 2, 8, 8});
    const Tensor<4> k = random_tensor(16, 8, 2, device).reshape<4>(Shape{1, 2, 8, 8});
    const Tensor<4> v = random_tensor(16, 8, 3, device).reshape<4>(Shape{1, 2, 8, 8});
    expect_fresh_draws_each_replay(device, 21, [&] {
      return module::attention(q, k, v, std::nullopt, std::nullopt,
                               {.scale = std::nullopt, .is_causal = false, .dropout = 0.5})
          .reshape<2>(Shape{16, 8});
    });
  }
}

TEST(Capture, ARegionThatThrowsKeepsNothingAndEagerOpsGoOn) {
  const Device cpu = Device::cpu();
  const Tensor<2> x = random_tensor(3, 4, 1, cpu);
  EXPECT_THROW(capture(cpu, [&] { (void)x.matmul(x); }), ShapeMismatch);
  EXPECT_FALSE(capture_open());
  EXPECT_TRUE(same_bits(x + x, x * 2.0));
}

// An update written straight into its parameter by the fused group (no new memory, no copy)
// replays as the eager ops run: each replay reads the values the last one wrote.
TEST(Capture, AnUpdateFusedIntoItsParameterReplaysAsEagerSteps) {
  const Device fused = Device::cpu().fused();
  Tensor<2> p = random_tensor(96, 128, 1, fused);
  Tensor<2> g = random_tensor(96, 128, 2, fused);
  Tensor<2> eager = random_tensor(96, 128, 1, Device::cpu());
  const Graph graph = capture(fused, [&] { p.assign((p - g * 0.125) * 0.99); });
  eager.assign((eager - random_tensor(96, 128, 2, Device::cpu()) * 0.125) * 0.99);
  EXPECT_TRUE(same_bits(p, eager));
  for (int i = 3; i < 8; ++i) {
    const Tensor<2> next = random_tensor(96, 128, i, Device::cpu());
    g.assign(Tensor<2>::from_data(next.into_data(), fused));
    graph.replay();
    eager.assign((eager - next * 0.125) * 0.99);
    EXPECT_TRUE(same_bits(p, eager)) << "replay " << i;
  }
}

TEST(Assign, WritesInPlaceSeenByEveryHandleAndView) {
  for (const Device& device : cpu_flavours()) {
    SCOPED_TRACE(device.to_string());
    Tensor<2> x = random_tensor(4, 6, 1, device);
    const Tensor<2> alias = x;
    const Tensor<2> view = x.slice({Slice(1, 3), Slice()});
    const Tensor<2> pending = x * 2.0;  // lazy under fusion: computed from the old values
    const std::vector<float> before = x.into_data().to_vec<float>();
    const Tensor<2> next = random_tensor(4, 6, 2, device);
    x.assign(next);
    EXPECT_TRUE(same_bits(alias, next));
    EXPECT_TRUE(same_bits(view, next.slice({Slice(1, 3), Slice()})));
    const std::vector<float> doubled = pending.into_data().to_vec<float>();
    for (std::size_t i = 0; i < before.size(); ++i) EXPECT_EQ(doubled[i], before[i] * 2.0f);
  }
}

// A temporary source nobody else holds moves its storage into a destination no view shares (the
// CPU's assign without a copy); with a view of the destination alive it is copied, so the view
// sees the values too.
TEST(Assign, ATemporarySourceMovesAndViewsStillSeeTheValues) {
  const Device cpu = Device::cpu();
  const Tensor<2> a = random_tensor(6, 5, 1, cpu);
  const Tensor<2> b = random_tensor(6, 5, 2, cpu);
  Tensor<2> x = Tensor<2>::zeros({6, 5}, cpu);
  const Tensor<2> alias = x;
  x.assign(a + b);
  EXPECT_TRUE(same_bits(x, a + b));
  EXPECT_TRUE(same_bits(alias, a + b));
  const Tensor<2> row = x.slice({Slice(2, 3), Slice()});
  x.assign(a * b);
  EXPECT_TRUE(same_bits(x, a * b));
  EXPECT_TRUE(same_bits(row, (a * b).slice({Slice(2, 3), Slice()})));
  EXPECT_TRUE(same_bits(a + b, a + b));  // the sources' other values are untouched
}

TEST(Assign, IntoViewsFromOverlappingSourcesAndEveryDType) {
  const Device cpu = Device::cpu();
  // Into a transposed view: the base's storage takes the values through the view's strides.
  Tensor<2> base = random_tensor(3, 5, 1, cpu);
  Tensor<2> transposed = base.transpose();
  const Tensor<2> values = random_tensor(5, 3, 2, cpu);
  transposed.assign(values);
  EXPECT_TRUE(same_bits(base, values.transpose()));
  // From a view of its own storage: the source is read whole before anything is written.
  Tensor<2> square = random_tensor(4, 4, 3, cpu);
  const Tensor<2> flipped = Tensor<2>::from_data(square.flip({0}).into_data(), cpu);
  square.assign(square.flip({0}));
  EXPECT_TRUE(same_bits(square, flipped));
  // Every dtype.
  for (DType dtype : {DType::F64, DType::F16, DType::BF16}) {
    Tensor<2> a = random_tensor(2, 3, 4, cpu).cast(dtype);
    const Tensor<2> b = random_tensor(2, 3, 5, cpu).cast(dtype);
    a.assign(b);
    EXPECT_TRUE(same_bits(a, b)) << dtype_name(dtype);
  }
  for (DType dtype : {DType::I64, DType::I32, DType::I16, DType::I8, DType::U64, DType::U32,
                      DType::U16, DType::U8}) {
    Tensor<1, Int> a = Tensor<1, Int>::zeros({5}, cpu, dtype);
    a.assign(Tensor<1, Int>::arange(0, 10, cpu, 2).cast(dtype));
    EXPECT_EQ(a.cast(DType::I64).into_data().to_vec<std::int64_t>(),
              (std::vector<std::int64_t>{0, 2, 4, 6, 8}))
        << dtype_name(dtype);
  }
  Tensor<1, Bool> flags = Tensor<1, Bool>::zeros({3}, cpu);
  flags.assign(Tensor<1, Int>::arange(0, 3, cpu).greater_elem(0));
  EXPECT_EQ(flags.into_data().to_vec<bool>(), (std::vector<bool>{false, true, true}));
}

TEST(Assign, RefusesOtherShapesDTypesDevicesAndRepeatedElements) {
  const Device cpu = Device::cpu();
  Tensor<2> x = Tensor<2>::zeros({2, 3}, cpu);
  const Tensor<2> before = Tensor<2>::from_data(x.into_data(), cpu);
  EXPECT_THROW(x.assign(Tensor<2>::zeros({3, 2}, cpu)), ShapeMismatch);
  EXPECT_THROW(x.assign(Tensor<2>::zeros({2, 3}, cpu, DType::F64)), DTypeMismatch);
  Tensor<2> expanded = Tensor<2>::zeros({1, 3}, cpu).expand<2>({2, 3});
  EXPECT_THROW(expanded.assign(Tensor<2>::ones({2, 3}, cpu)), InvalidArgument);
  EXPECT_TRUE(same_bits(x, before));  // nothing was written
  // Decorator flags may differ: the values come to x's form of the device.
  x.assign(Tensor<2>::ones({2, 3}, cpu.fused().autodiff()));
  EXPECT_EQ(x.into_data().to_vec<float>(), std::vector<float>(6, 1.0f));
  // A default-constructed tensor is an empty CPU tensor.
  const Tensor<2> empty;
  EXPECT_EQ(empty.shape(), Shape({0, 0}));
  EXPECT_EQ(empty.device(), cpu);
}

// Random programs of eager ops, assigns and replays: every replayed output against the same ops
// run eagerly on the values its inputs hold at that moment.
TEST(Capture, RandomInterleavingsOfEagerOpsAssignsAndReplaysMatchEagerRuns) {
  const Device cpu = Device::cpu();
  std::mt19937_64 rng(2026);
  using Region = std::function<Tensor<2>(const Tensor<2>&, const Tensor<2>&)>;
  const std::vector<Region> regions = {
      [](const Tensor<2>& a, const Tensor<2>& b) { return (a + b).exp() - a * b; },
      [](const Tensor<2>& a, const Tensor<2>& b) { return a.matmul(b.transpose()).tanh(); },
      [](const Tensor<2>& a, const Tensor<2>& b) { return (a - b).abs().sum_dim(1) + a; },
      [](const Tensor<2>& a, const Tensor<2>& b) {
        return activation::softmax(a, 0) * activation::sigmoid(b);
      },
  };
  struct Live {
    Tensor<2> a, b, out;
    Graph graph;
    std::size_t region;
  };
  std::vector<Live> lives;
  std::uint64_t seed_counter = 1;
  const auto fresh = [&] { return random_tensor(5, 5, seed_counter++, cpu); };
  for (std::size_t r = 0; r < regions.size(); ++r) {
    Live live{fresh(), fresh(), {}, {}, r};
    live.graph = capture(cpu, [&] { live.out = regions[r](live.a, live.b); });
    lives.push_back(std::move(live));
  }
  Tensor<2> scratch = fresh();
  std::size_t checked = 0;
  for (int step = 0; step < 100000; ++step) {
    Live& live = lives[rng() % lives.size()];
    switch (rng() % 4) {
      case 0:  // an eager op between replays, reading and writing other memory
        scratch = (scratch * 0.5 + live.out).tanh();
        break;
      case 1:
        (rng() % 2 == 0 ? live.a : live.b).assign(fresh());
        break;
      case 2:
        live.graph.replay();
        if (step % 50 == 0) {
          ASSERT_TRUE(same_bits(live.out, regions[live.region](live.a, live.b))) << "step " << step;
          ++checked;
        }
        break;
      case 3:
        live.a.assign(live.b * 2.0);  // an input written from an eager op's result
        break;
    }
  }
  for (Live& live : lives) {
    live.graph.replay();
    EXPECT_TRUE(same_bits(live.out, regions[live.region](live.a, live.b)));
  }
  EXPECT_GT(checked, 100u);
}

TEST(Capture, ManyReplaysKeepMemoryFlat) {
  const Device device = Device::cpu().autodiff();
  Mlp model = make_mlp(device);
  optim::Sgd opt;
  Tensor<2> x = random_tensor(16, 12, 1, Device::cpu());
  const Tensor<2> t = random_tensor(16, 3, 2, Device::cpu());
  Tensor<1> loss;
  const Graph graph = capture(device, [&] {
    loss = nn::mse_loss(model.forward(x), t);
    opt.step(model, loss.backward(), 0.01);
  });
  for (int i = 0; i < 100; ++i) graph.replay();
  const std::int64_t in_use = Device::cpu().memory_stats().bytes_in_use;
  for (int i = 0; i < 10000; ++i) graph.replay();
  EXPECT_EQ(Device::cpu().memory_stats().bytes_in_use, in_use);
  EXPECT_TRUE(std::isfinite(loss.into_scalar<float>()));
}

TEST(Capture, TheReplayCheckerReplaysEachOpAlone) {
  auto& layer = dynamic_cast<capturing::CaptureBackend&>(backend_for(Device::cpu()));
  layer.set_check(true);
  const std::uint64_t before = layer.checks_run();
  const Tensor<2> x = random_tensor(3, 4, 1, Device::cpu());
  const Tensor<2> y = (x + 1.0).exp();
  layer.set_check(false);
  EXPECT_EQ(layer.checks_run(), before + 3);  // from_data, add_scalar, exp
  EXPECT_EQ(y.shape(), Shape({3, 4}));
}

}  // namespace
}  // namespace kiln
