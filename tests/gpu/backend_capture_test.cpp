// Capture on cuda:0 (kiln/graph.h, src/backends/cuda/cuda_graph.cpp): the region becomes one CUDA
// graph whose replays equal the same ops run eagerly on the new values, bit for bit (plain,
// fused, autodiff, a training step with SGD); eager ops between replays keep their values (the
// graph's memory is its own); memory stays flat over many replays; what a CUDA graph cannot
// replay is refused at capture naming the op, and the device works on after a refusal.
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gpu/gpu_test_support.h"

using namespace kiln;

namespace gpu_capture_test {

Tensor<2> random_on(const Device& device, Shape shape, std::uint64_t seed) {
  return Tensor<2>::wrap(test::host_random(shape, DType::F32, seed, -2, 2)).to_device(device);
}

bool same_bits(const Tensor<2>& a, const Tensor<2>& b) {
  const TensorData x = a.into_data();
  const TensorData y = b.into_data();
  return x.shape() == y.shape() && x.bytes().size() == y.bytes().size() &&
         std::memcmp(x.bytes().data(), y.bytes().data(), x.bytes().size()) == 0;
}

Tensor<2> region_ops(const Tensor<2>& x, const Tensor<2>& w, const Tensor<2>& b) {
  const Tensor<2> h = activation::relu(x.matmul(w) + b);
  return (activation::softmax(h, 1) * 3.0 - h.sum_dim(1)).tanh() +
         x.slice({Slice(), Slice(0, 8)}).exp().sum_dim(1);
}

}  // namespace gpu_capture_test

TEST(GpuCapture, ReplaysEqualTheOpsRunEagerlyOnTheNewValues) {
  KILN_REQUIRE_GPU();
  using namespace gpu_capture_test;
  for (const Device& flavour :
       {device, device.fused(), device.autodiff(), device.fused().autodiff()}) {
    SCOPED_TRACE(flavour.to_string());
    Tensor<2> x = random_on(flavour, {300, 96}, 1);
    const Tensor<2> w = random_on(flavour, {96, 40}, 2);
    const Tensor<2> b = random_on(flavour, {1, 40}, 3);
    Tensor<2> y;
    const Graph graph = capture(flavour, [&] { y = region_ops(x, w, b); });
    EXPECT_TRUE(graph.on_device());
    EXPECT_TRUE(same_bits(y, region_ops(x, w, b)));
    for (std::uint64_t round = 0; round < 3; ++round) {
      const Tensor<2> next = random_on(flavour, {300, 96}, 10 + round);
      x.assign(next);
      graph.replay();
      EXPECT_TRUE(same_bits(y, region_ops(next, w, b))) << "round " << round;
    }
  }
}

TEST(GpuCapture, EagerOpsBetweenReplaysKeepTheirValuesAndMemoryStaysFlat) {
  KILN_REQUIRE_GPU();
  using namespace gpu_capture_test;
  Tensor<2> x = random_on(device, {256, 256}, 1);
  Tensor<2> y;
  const Graph graph = capture(device, [&] { y = (x.matmul(x) * 0.01).exp() + x; });
  // Eager work allocates and frees while replays run: none may land in the graph's memory.
  std::vector<Tensor<2>> kept;
  std::vector<std::vector<float>> want;
  for (int i = 0; i < 20; ++i) {
    graph.replay();
    kept.push_back(random_on(device, {256, 256}, 100 + i) * 2.0);
    want.push_back(kept.back().into_data().to_vec<float>());
  }
  for (int i = 0; i < 20; ++i) EXPECT_EQ(kept[i].into_data().to_vec<float>(), want[i]) << i;
  EXPECT_TRUE(same_bits(y, (x.matmul(x) * 0.01).exp() + x));
  kept.clear();
  for (int i = 0; i < 100; ++i) graph.replay();
  device.sync();
  const std::int64_t in_use = device.memory_stats().bytes_in_use;
  for (int i = 0; i < 10000; ++i) graph.replay();
  device.sync();
  EXPECT_EQ(device.memory_stats().bytes_in_use, in_use);
}

TEST(GpuCapture, AReplayedTrainingStepTrainsAsEagerStepsDo) {
  KILN_REQUIRE_GPU();
  using namespace gpu_capture_test;
  for (const Device& plain : {device, device.fused()}) {
    SCOPED_TRACE(plain.to_string());
    const Device ad = plain.autodiff();
    auto make = [&] {
      return std::vector<Tensor<2>>{random_on(ad, {64, 32}, 1).require_grad(),
                                    random_on(ad, {1, 32}, 2).require_grad(),
                                    random_on(ad, {32, 4}, 3).require_grad()};
    };
    std::vector<Tensor<2>> eager = make(), captured = make();
    auto step = [](std::vector<Tensor<2>>& p, const Tensor<2>& x, const Tensor<2>& t,
                   bool in_place) {
      const Tensor<2> h = activation::relu(x.matmul(p[0]) + p[1]).matmul(p[2]);
      Tensor<1> loss = ((h - t) * (h - t)).mean();
      const Gradients grads = loss.backward();
      for (Tensor<2>& q : p) {
        const Tensor<2> next = q.inner() - q.grad(grads)->inner() * 0.002;
        if (in_place) {
          q.inner().assign(next);
        } else {
          q = Tensor<2>::from_inner(next).require_grad();
        }
      }
      return loss;
    };
    Tensor<2> x = random_on(plain, {16, 64}, 50);
    Tensor<2> t = random_on(plain, {16, 4}, 51);
    Tensor<1> loss;
    const Graph graph = capture(ad, [&] { loss = step(captured, x, t, true); });
    Tensor<1> eager_loss =
        step(eager, random_on(plain, {16, 64}, 50), random_on(plain, {16, 4}, 51), false);
    EXPECT_EQ(loss.into_scalar<float>(), eager_loss.into_scalar<float>());
    for (std::uint64_t i = 1; i < 10; ++i) {
      x.assign(random_on(plain, {16, 64}, 50 + 2 * i));
      t.assign(random_on(plain, {16, 4}, 51 + 2 * i));
      graph.replay();
      eager_loss = step(eager, random_on(plain, {16, 64}, 50 + 2 * i),
                        random_on(plain, {16, 4}, 51 + 2 * i), false);
      EXPECT_EQ(loss.into_scalar<float>(), eager_loss.into_scalar<float>()) << "step " << i;
    }
    for (std::size_t k = 0; k < eager.size(); ++k)
      EXPECT_TRUE(same_bits(captured[k].inner(), eager[k].inner())) << "parameter " << k;
  }
}

TEST(GpuCapture, WhatACudaGraphCannotReplayIsRefusedNamingTheOp) {
  KILN_REQUIRE_GPU();
  using namespace gpu_capture_test;
  const Tensor<2> x = random_on(device, {8, 8}, 1);
  const auto refused = [&](const std::function<void()>& region, const std::string& op) {
    try {
      capture(device, region);
      ADD_FAILURE() << op << " was captured";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("[" + op + "]"), std::string::npos) << e.what();
    }
  };
  refused(
      [&] {
        (void)Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{1}, {1, 1}), device);
      },
      "from_data");
  refused([&] { (void)(x + 1.0).into_data(); }, "into_data");
  refused([&] { (void)x.greater_elem(0.0).argwhere(); }, "argwhere");
  refused(
      [&] {
        (void)(x * 2.0);
        device.sync();
      },
      "sync");
  refused([&] { (void)(x + 1.0).to_device(Device::cpu()); }, "to_device");
  // The device goes on: eager ops and a new capture.
  EXPECT_TRUE(same_bits(x + x, x * 2.0));
  Tensor<2> y;
  const Graph graph = capture(device, [&] { y = x * 3.0; });
  graph.replay();
  EXPECT_TRUE(same_bits(y, x * 3.0));
}

// An optimizer inside the region (AdamW under a schedule): its learning rate and bias corrections
// come from a table the host writes before each run of the graph, which must not share memory
// with the ops the graph runs before reading it. Random numbers (dropout) come the same way.
TEST(GpuCapture, AReplayedAdamWStepWithDropoutTrainsAsEagerStepsDo) {
  KILN_REQUIRE_GPU();
  using namespace gpu_capture_test;
  struct Net {
    nn::Linear first, second;
    nn::Dropout dropout{.p = 0.25};
    KILN_MODULE(first, second)
    Tensor<2> forward(const Tensor<2>& x) const {
      return second.forward(dropout.forward(activation::relu(first.forward(x))));
    }
  };
  const optim::CosineAnnealingLr schedule{.base_lr = 0.01, .t_max = 20};
  // Two runs of the same steps on one device from the same seeds: eager, then captured.
  auto run = [&](bool captured) {
    const Device plain = device.fused();
    plain.seed(4);
    Net net = nn::train(Net{nn::LinearConfig{48, 64}.init(plain.autodiff()),
                            nn::LinearConfig{64, 5}.init(plain.autodiff())});
    optim::AdamW opt({.weight_decay = 0.01});
    auto step = [&](const Tensor<2>& x, const Tensor<1, Int>& y) {
      Tensor<1> loss = nn::cross_entropy(net.forward(x), y);
      opt.step(net, loss.backward(), schedule);
      return loss;
    };
    auto batch = [&](std::uint64_t i) { return random_on(plain, {32, 48}, 60 + i); };
    const Tensor<1, Int> labels = Tensor<1, Int>::arange(0, 32, plain).remainder_scalar(5);
    std::vector<float> losses{step(batch(0), labels).into_scalar<float>()};
    Tensor<2> x = batch(1);
    Tensor<1> loss;
    Graph graph;
    if (captured)
      graph = capture(plain, [&] { loss = step(x, labels); });
    else
      loss = step(x, labels);
    losses.push_back(loss.into_scalar<float>());
    for (std::uint64_t i = 2; i < 12; ++i) {
      if (captured) {
        x.assign(batch(i));
        graph.replay();
      } else {
        loss = step(batch(i), labels);
      }
      losses.push_back(loss.into_scalar<float>());
    }
    return losses;
  };
  const std::vector<float> eager = run(false);
  const std::vector<float> captured = run(true);
  for (std::size_t i = 0; i < eager.size(); ++i) {
    EXPECT_TRUE(std::isfinite(captured[i])) << "step " << i;
    EXPECT_NEAR(captured[i], eager[i], 1e-5) << "step " << i;
  }
}
