// Benchmarks of the autodiff decorator (DESIGN.md §8), run by bench/run_all.sh beside cpu_bench
// and paired with bench/peer_torch.py by bench/report.py:
// - small_add_tracked / small_add_untracked / small_add_plain: x + y on 16 f32 elements with x
//   requiring grad (a graph node made and freed per op), on the autodiff device untracked, and
//   on the plain CPU device. The target is tracked <= 2x plain.
// - mlp_step/B: one SGD step of a 784-512-512-10 ReLU MLP with a cross-entropy loss (through
//   log_softmax) at batch B: forward, backward, parameter update, and reading the loss back.
// - replay_cost/N: Graph::replay of a region of N ops on 16 elements (x = x * 2 * 0.5 ...): the
//   host cost of a replay, fixed and per node; 16 replays per iteration, then a read. host_us:
//   the median time of one replay call without that read (on cuda the launch alone).
// - mlp_step_captured/B: the same step captured once (kiln/graph.h) and replayed: one replay and
//   the loss read back per iteration (on cuda one CUDA graph launch; on the CPU the recorded ops
//   without the tensor layer and the decorators).
#include <benchmark/benchmark.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "bench_common.h"

namespace {

using namespace kiln;
using namespace kiln::bench;

const Device kCpu = Device::cpu();
const Device kAd = Device::cpu().autodiff();
// mlp_step's device: KILN_BENCH_DEVICE (Device::parse's forms; default cpu), fused when
// KILN_BENCH_FUSED=1 (scripts/gpu-check times it on cuda:0 with and without fusion).
const Device kMlp = [] {
  const char* text = std::getenv("KILN_BENCH_DEVICE");
  const char* fused = std::getenv("KILN_BENCH_FUSED");
  const Device device = text != nullptr && *text != '\0' ? Device::parse(text) : Device::cpu();
  const bool fuse = fused != nullptr && std::string_view(fused) == "1";
  return (fuse ? device.fused() : device.without_fusion()).autodiff();
}();

// ---- small_add: per-op overhead on 16 elements (read-free, as in cpu_bench) ----
void small_add_on(benchmark::State& state, Device device, bool track) {
  guarded(state, [&] {
    const std::vector<float> a = host_values(16, 1), b = host_values(16, 2);
    auto x = Tensor<1>::from_data(TensorData::from_vec(a, {16}), device);
    if (track) x = x.require_grad();
    const auto y = Tensor<1>::from_data(TensorData::from_vec(b, {16}), device);
    const auto first = x + y;
    if (first.is_require_grad() != track) throw std::runtime_error("small_add: tracking is off");
    const std::vector<float> got = first.into_data().to_vec<float>();
    for (std::size_t i = 0; i < got.size(); ++i) expect_near(got[i], a[i] + b[i], 0, "small_add");
    for (auto _ : state) {
      auto z = x + y;  // with track: a node is recorded here and freed with z
      benchmark::DoNotOptimize(z.primitive().get());
    }
  });
}
void small_add_tracked(benchmark::State& state) { small_add_on(state, kAd, true); }
void small_add_untracked(benchmark::State& state) { small_add_on(state, kAd, false); }
void small_add_plain(benchmark::State& state) { small_add_on(state, kCpu, false); }
BENCHMARK(small_add_tracked)->MinTime(0.2);
BENCHMARK(small_add_untracked)->MinTime(0.2);
BENCHMARK(small_add_plain)->MinTime(0.2);

// ---- mlp_step ----
constexpr std::int64_t kSizes[] = {784, 512, 512, 10};
constexpr double kLearningRate = 0.01;

struct Mlp {
  std::vector<Tensor<2>> params;  // w1 b1 w2 b2 w3 b3, w: [in, out], b: [1, out]
  std::vector<std::vector<float>> host;

  Mlp() {
    for (std::size_t l = 0; l < 3; ++l) {
      const std::int64_t in = kSizes[l], out = kSizes[l + 1];
      const float scale = 2.0f / std::sqrt(static_cast<float>(in));  // uniform ±1/sqrt(in)
      for (const Shape& shape : {Shape{in, out}, Shape{1, out}}) {
        std::vector<float> v =
            host_values(shape.num_elements(), static_cast<std::uint32_t>(10 + host.size()));
        for (float& e : v) e *= scale;
        params.push_back(Tensor<2>::from_data(TensorData::from_vec(v, shape), kMlp).require_grad());
        host.push_back(std::move(v));
      }
    }
  }

  Tensor<1> loss(const Tensor<2>& x, const Tensor<2>& one_hot) const {
    auto h = activation::relu(x.matmul(params[0]) + params[1]);
    h = activation::relu(h.matmul(params[2]) + params[3]);
    const auto logits = h.matmul(params[4]) + params[5];
    return -(activation::log_softmax(logits, 1) * one_hot).sum_dim(1).mean();
  }

  // Plain SGD; the update runs on the inner device, outside any graph.
  void update(const Gradients& grads) {
    for (auto& p : params) {
      const auto g = p.grad(grads);
      if (!g) throw std::runtime_error("mlp_step: a parameter got no gradient");
      p = Tensor<2>::from_inner(p.inner() - g->inner() * kLearningRate).require_grad();
    }
  }

  // The same update written into the parameters' own storage (what a captured step needs).
  void update_in_place(const Gradients& grads) {
    for (auto& p : params) {
      const auto g = p.grad(grads);
      if (!g) throw std::runtime_error("mlp_step: a parameter got no gradient");
      p.inner().assign(p.inner() - g->inner() * kLearningRate);
    }
  }
};

// The batch and one-hot labels of mlp_step: x [batch, 784] and y [batch, 10] on kMlp.
struct Batch {
  std::vector<float> xv;
  std::vector<int> labels;
  Tensor<2> x, y;
  explicit Batch(std::int64_t batch) : xv(host_values(batch * kSizes[0], 3)) {
    labels.resize(static_cast<std::size_t>(batch));
    std::vector<float> one_hot(static_cast<std::size_t>(batch * 10), 0.0f);
    for (std::size_t r = 0; r < labels.size(); ++r) {
      labels[r] = static_cast<int>((r * 7 + r / 3) % 10);
      one_hot[r * 10 + labels[r]] = 1.0f;
    }
    x = Tensor<2>::from_data(TensorData::from_vec(xv, {batch, kSizes[0]}), kMlp);
    y = Tensor<2>::from_data(TensorData::from_vec(one_hot, {batch, 10}), kMlp);
  }
};

// The loss of the first `rows` rows and d loss / d b3 in double, on the host.
struct Reference {
  double loss = 0;
  std::vector<double> db3 = std::vector<double>(10, 0.0);
};
Reference reference(const Mlp& mlp, const std::vector<float>& x, const std::vector<int>& labels,
                    std::int64_t rows) {
  Reference out;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::vector<double> h(x.begin() + r * kSizes[0], x.begin() + (r + 1) * kSizes[0]);
    for (std::size_t l = 0; l < 3; ++l) {
      const std::int64_t in = kSizes[l], n = kSizes[l + 1];
      const auto& w = mlp.host[2 * l];
      const auto& b = mlp.host[2 * l + 1];
      std::vector<double> next(b.begin(), b.end());
      for (std::int64_t i = 0; i < in; ++i) {
        if (h[i] == 0) continue;
        for (std::int64_t j = 0; j < n; ++j) next[j] += h[i] * w[i * n + j];
      }
      if (l < 2) {
        for (double& v : next) v = std::max(v, 0.0);
      }
      h = std::move(next);
    }
    double top = h[0], total = 0;
    for (double v : h) top = std::max(top, v);
    for (double v : h) total += std::exp(v - top);
    const int label = labels[static_cast<std::size_t>(r)];
    out.loss += (top + std::log(total) - h[label]) / rows;
    for (int j = 0; j < 10; ++j) {
      out.db3[j] += (std::exp(h[j] - top) / total - (j == label ? 1 : 0)) / rows;
    }
  }
  return out;
}

void set_flops(benchmark::State& state, std::int64_t batch) {
  const double macs = static_cast<double>(batch) *
                      (kSizes[0] * kSizes[1] + kSizes[1] * kSizes[2] + kSizes[2] * kSizes[3]);
  // Forward, then two matmuls per layer in backward but the first (no gradient for the input).
  state.counters["flops"] = 2.0 * (3 * macs - static_cast<double>(batch) * kSizes[0] * kSizes[1]);
}

// Times step (one training step returning its loss, read back) over the benchmark's iterations.
// SGD on a fixed batch must make progress, or the update did not happen.
template <class Step>
void time_steps(benchmark::State& state, Step step) {
  double first = std::nan(""), last = 0;
  for (auto _ : state) {
    last = step();
    if (std::isnan(first)) first = last;
    benchmark::DoNotOptimize(last);
  }
  if (state.iterations() > 3 && !(last < first)) {
    throw std::runtime_error("mlp_step: the loss did not decrease (" + std::to_string(first) +
                             " -> " + std::to_string(last) + ")");
  }
}

// The loss of the first 64 rows and the gradient of the last bias against float64 loops.
void spot_check(const Mlp& mlp, const Batch& data) {
  constexpr std::int64_t kChecked = 64;
  const Reference want = reference(mlp, data.xv, data.labels, kChecked);
  const auto head = mlp.loss(data.x.slice({{0, kChecked}}), data.y.slice({{0, kChecked}}));
  expect_near(head.into_scalar<float>(), want.loss, 1e-4, "mlp_step loss");
  const Gradients grads = head.backward();
  const auto db3 = mlp.params[5].grad(grads)->into_data().to_f64_vec();
  for (int j = 0; j < 10; ++j) expect_near(db3[j], want.db3[j], 1e-4, "mlp_step d b3");
}

void mlp_step(benchmark::State& state) {
  const std::int64_t batch = state.range(0);
  set_flops(state, batch);
  guarded(state, [&] {
    Mlp mlp;
    const Batch data(batch);
    const Tensor<2>& x = data.x;
    const Tensor<2>& y = data.y;

    spot_check(mlp, data);

    time_steps(state, [&] {
      const auto loss = mlp.loss(x, y);
      mlp.update(loss.backward());
      return loss.into_scalar<float>();
    });
  });
}

void mlp_step_captured(benchmark::State& state) {
  const std::int64_t batch = state.range(0);
  set_flops(state, batch);
  guarded(state, [&] {
    Mlp mlp;
    const Batch data(batch);
    // The eager step against float64 on the first rows, then the captured run's loss against it.
    spot_check(mlp, data);
    const double eager_loss = mlp.loss(data.x, data.y).into_scalar<float>();
    Tensor<1> loss;
    const Graph step = capture(kMlp, [&] {
      loss = mlp.loss(data.x, data.y);
      mlp.update_in_place(loss.backward());
    });
    expect_near(loss.into_scalar<float>(), eager_loss, 1e-5, "mlp_step_captured first run");
    time_steps(state, [&] {
      step.replay();
      return loss.into_scalar<float>();
    });
  });
}

BENCHMARK(mlp_step)
    ->Arg(128)
    ->Arg(4096)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.5);
BENCHMARK(mlp_step_captured)
    ->Arg(128)
    ->Arg(4096)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.5);

void replay_cost(benchmark::State& state) {
  const std::int64_t nodes = state.range(0);
  guarded(state, [&] {
    const Device device = kMlp.without_autodiff();
    Tensor<1> x = Tensor<1>::from_data(TensorData::from_vec(host_values(16, 5), {16}), device);
    Tensor<1> y;
    const Graph graph = capture(device, [&] {
      Tensor<1> t = x;
      // Exact in f32 (no value changes), and not a no-op the fusion decorator would drop.
      for (std::int64_t i = 0; i < nodes; ++i) t = i % 2 == 0 ? t * 2.0 : t * 0.5;
      y = t;
    });
    const std::vector<float> want = y.into_data().to_vec<float>();  // the capture's one run
    constexpr int kReplays = 16;
    // The calls alone, apart from the wait for their work: on cuda a replay is a graph launch
    // that returns before the kernels run, so the iteration's time is the device's.
    std::vector<double> host_us;
    for (auto _ : state) {
      const auto start = std::chrono::steady_clock::now();
      for (int r = 0; r < kReplays; ++r) graph.replay();
      host_us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count() /
          kReplays);
      const std::vector<float> got = y.into_data().to_vec<float>();
      if (got != want) throw std::runtime_error("replay_cost: the replay changed the values");
    }
    std::sort(host_us.begin(), host_us.end());
    if (!host_us.empty()) state.counters["host_us"] = host_us[host_us.size() / 2];
    state.counters["nodes"] = static_cast<double>(graph.node_count());
    state.SetItemsProcessed(state.iterations() * kReplays);
  });
}
BENCHMARK(replay_cost)->Arg(1)->Arg(64)->Arg(256)->UseRealTime()->MinTime(0.3);

}  // namespace

BENCHMARK_MAIN();
