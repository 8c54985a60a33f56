// Issue 5's GPU speed targets through kiln's public tensor API on Device::cuda(0), against the
// same workloads in bench/peer_torch_gpu.py (same row names); bench/run_gpu.sh runs both beside
// gpu_bench (kiln_cuda_lib's raw functions) and bench/report_gpu.py prints one table.
//
// Timing: kiln's CUDA stream is internal, so a sample is wall clock around kOps calls followed by
// one Device::sync (a cuStreamSynchronize), divided by kOps; each benchmark runs a fixed number
// of such samples (its Iterations) and run_gpu.sh's --benchmark_repetitions gives the median.
// The torch peer times the same calls the same way (perf_counter + torch.cuda.synchronize()).
// Every workload is run and checked against a float64 host reference before timing (that run
// also compiles its kernels: NVRTC on first use, the disk cache after), and the last timed result
// is checked again, so no row can time nothing.
//
// Rows (counters per op: "bytes" read + written for memory-bound work, "flops" for conv):
//   sum/8192/all, sum/8192/dim1, sum/8192/dim0   sum(), sum_dim(1) (last), sum_dim(0) (first)
//   softmax/8192, log_softmax/8192                along the last dim of [8192, 8192] f32
//   layer_norm/8192                               over the last dim of [8192, 8192] f32
//   layer_norm/65536x768                          over the last dim of [65536, 768] f32
//   chain8/4096, chain8/8192                      ((((-(x*y+z)).exp()*2)+1).tanh())*x, eager
//   chain8_fused/4096, chain8_fused/8192          the same on cuda:0.fused(): one fused kernel
//   fma_exp/8192, fma_exp_fused/8192              (x*y+z).exp(), eager and fused
//   small_add_host/16                             host time per 16-element add, bursts of 200
//   chain8_host{,_fused}/64                       host time per op of chain8 on [64, 64], flushed
//   conv2d/f32, conv2d/bf16                       x [32,64,56,56], w [64,64,3,3], stride 1, pad 1,
//                                                 the path kiln chooses per shape; .../cudnn and
//                                                 .../kiln with KILN_CONV forcing cuDNN or kiln's
//                                                 own im2col + cuBLASLt (torch's rows: cuDNN)
//   conv2d/bf16/legacy                            cuDNN's legacy calls alone (KILN_CUDNN_GRAPH=0)
//   conv2d/bf16/nhwc[/legacy]                     the same with x and w channels-last views (as
//                                                 torch's row)
//   conv2d/bf16/nhwc/{128x28,256x14,512x7}        ResNet-50's other 3x3 layers, batch 32
//   tensor_topk/4096/32768/8, tensor_sort/16777216   Tensor::topk_with_indices, sort_with_indices
//   tensor_cumsum/16777216/0, tensor_cumsum/8192/8192   cumsum of one 16M row; along the last dim
//   nvrtc_first_compile, disk_cache_load          NVRTC seconds per kernel in a fresh process with
//                                                 an empty cache dir; disk-cache load per kernel
//                                                 in a second process on that dir
#include <benchmark/benchmark.h>
#include <kiln/kiln.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_common.h"
#include "runtime/cuda_plugin.h"
#include "tests/support/scoped_env.h"

namespace {

using namespace kiln;
using namespace kiln::bench;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// cuda:0 once per process, or the reason there is none.
const std::optional<Device>& gpu(std::string* reason) {
  static std::string why;
  static const std::optional<Device> device = []() -> std::optional<Device> {
    try {
      return Device::cuda(0);
    } catch (const Error& error) {
      why = error.what();
      return std::nullopt;
    }
  }();
  *reason = why;
  return device;
}

// Runs body(cuda:0) inside guarded(); without a GPU the row is skipped with the reason.
template <class Body>
void on_gpu(benchmark::State& state, Body&& body) {
  std::string reason;
  const auto& device = gpu(&reason);
  if (!device) return state.SkipWithError(("no CUDA device: " + reason).c_str());
  guarded(state, [&] { body(*device); });
}

// Per iteration: ops calls of op, then Device::sync; the manual time is that wall time / ops.
// Every result is held until the sync: on a fused device an unheld result is never computed.
// Returns the last result, for the caller to check.
template <class Op>
auto time_ops(benchmark::State& state, const Device& device, int ops, Op&& op) {
  std::vector<decltype(op())> results;
  results.reserve(static_cast<std::size_t>(ops));
  results.push_back(op());
  device.sync();
  for (auto _ : state) {
    results.clear();
    const auto start = Clock::now();
    for (int i = 0; i < ops; ++i) results.push_back(op());
    device.sync();
    state.SetIterationTime(seconds_since(start) / ops);
  }
  return results.back();
}

template <std::size_t D>
std::vector<double> host(const Tensor<D>& t) {
  return t.into_data().to_f64_vec();
}
std::vector<double> host_1d(const Tensor<1>& t) { return t.into_data().to_f64_vec(); }

void expect_all_near(const std::vector<double>& got, const std::vector<double>& want,
                     double absolute, double relative, const char* what) {
  if (got.size() != want.size()) throw std::runtime_error(std::string(what) + ": size differs");
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= absolute + relative * std::abs(want[i]))) {
      throw std::runtime_error(std::string(what) + ": element " + std::to_string(i) + " is " +
                               std::to_string(got[i]) + ", want " + std::to_string(want[i]));
    }
  }
}

// Rows of a [rows, cols] tensor, for references of a few rows of a large result.
Tensor<2> rows_of(const Tensor<2>& t, std::int64_t first, std::int64_t count) {
  return t.slice({Slice(first, first + count), Slice::all()});
}

constexpr std::uint64_t kSeed = 20250805;

// ---- sum 8192^2 f32 ----
constexpr std::int64_t kSumN = 8192;

// float64 sums of x, x's rows and x's columns. Made once per process: the device's seeded random
// gives every repetition the same x (were it not so, the checks would fail, not pass).
struct SumReference {
  std::vector<double> all, rows, cols;
};
const SumReference& sum_reference(const Tensor<2>& x) {
  static const SumReference reference = [&] {
    const std::int64_t n = x.shape()[0];
    const std::vector<double> values = host(x);
    SumReference r{{0.0},
                   std::vector<double>(static_cast<std::size_t>(n), 0.0),
                   std::vector<double>(static_cast<std::size_t>(n), 0.0)};
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        const double v = values[static_cast<std::size_t>(i * n + j)];
        r.rows[static_cast<std::size_t>(i)] += v;
        r.cols[static_cast<std::size_t>(j)] += v;
      }
      r.all[0] += r.rows[static_cast<std::size_t>(i)];
    }
    return r;
  }();
  return reference;
}

void sum_bench(benchmark::State& state, int which) {  // 0: all, 1: dim 1, 2: dim 0
  on_gpu(state, [&](const Device& device) {
    const std::int64_t n = kSumN;
    device.seed(kSeed);
    // [0, 1): no cancellation, so a wrong or missing result is far from the reference.
    const auto x = Tensor<2>::random({n, n}, Distribution::uniform(0, 1), device);
    const SumReference& reference = sum_reference(x);
    const std::vector<double>& want = which == 0   ? reference.all
                                      : which == 1 ? reference.rows
                                                   : reference.cols;
    auto run = [&](auto op) {
      expect_all_near(host(op()), want, 0, 3e-5, "sum");
      expect_all_near(host(time_ops(state, device, 20, op)), want, 0, 3e-5, "sum");
    };
    if (which == 0) {
      run([&] { return x.sum(); });
    } else {
      run([&] { return x.sum_dim(which == 1 ? 1 : 0); });
    }
    state.counters["bytes"] =
        static_cast<double>(n * n + static_cast<std::int64_t>(want.size())) * 4;
  });
}

// ---- softmax / log_softmax along the last dim of 8192^2 f32 ----
void softmax_bench(benchmark::State& state, bool log) {
  on_gpu(state, [&](const Device& device) {
    const std::int64_t n = kSumN;
    device.seed(kSeed + 1);
    const auto x = Tensor<2>::random({n, n}, Distribution::uniform(-4, 4), device);
    auto op = [&] { return log ? activation::log_softmax(x, 1) : activation::softmax(x, 1); };
    // Rows 0..3 and the last 4 against float64.
    auto check = [&](const Tensor<2>& y) {
      for (const std::int64_t first : {std::int64_t{0}, n - 4}) {
        const std::vector<double> in = host(rows_of(x, first, 4));
        std::vector<double> want(in.size());
        for (std::size_t r = 0; r < 4; ++r) {
          const double* row = in.data() + r * n;
          const double top = *std::max_element(row, row + n);
          double total = 0;
          for (std::int64_t j = 0; j < n; ++j) total += std::exp(row[j] - top);
          for (std::int64_t j = 0; j < n; ++j) {
            const double shifted = row[j] - top - std::log(total);
            want[r * n + j] = log ? shifted : std::exp(shifted);
          }
        }
        expect_all_near(host(rows_of(y, first, 4)), want, log ? 1e-5 : 1e-10, 1e-5,
                        log ? "log_softmax" : "softmax");
      }
    };
    check(op());
    check(time_ops(state, device, 10, op));
    state.counters["bytes"] = static_cast<double>(2 * n * n * 4);
  });
}

// ---- layer_norm over the last dim of [rows, n] f32, gamma and beta ----
void layer_norm_bench(benchmark::State& state, std::int64_t rows, std::int64_t n) {
  on_gpu(state, [&](const Device& device) {
    device.seed(kSeed + 3);
    const auto x = Tensor<2>::random({rows, n}, Distribution::uniform(-4, 4), device);
    const auto gamma = Tensor<1>::random({n}, Distribution::uniform(0.5, 1.5), device);
    const auto beta = Tensor<1>::random({n}, Distribution::uniform(-1, 1), device);
    auto op = [&] { return module::layer_norm(x, gamma, beta, 1e-5); };
    auto check = [&](const Tensor<2>& y) {
      const std::vector<double> in = host(rows_of(x, 0, 4)), g = host_1d(gamma), b = host_1d(beta);
      std::vector<double> want(in.size());
      for (std::size_t r = 0; r < 4; ++r) {
        const double* row = in.data() + r * n;
        double mean = 0, var = 0;
        for (std::int64_t j = 0; j < n; ++j) mean += row[j] / n;
        for (std::int64_t j = 0; j < n; ++j) var += (row[j] - mean) * (row[j] - mean) / n;
        for (std::int64_t j = 0; j < n; ++j) {
          want[r * n + j] = (row[j] - mean) / std::sqrt(var + 1e-5) * g[j] + b[j];
        }
      }
      expect_all_near(host(rows_of(y, 0, 4)), want, 1e-5, 1e-5, "layer_norm");
    };
    check(op());
    check(time_ops(state, device, 10, op));
    state.counters["bytes"] = static_cast<double>(2 * rows * n * 4);  // x read, y written
  });
}

// ---- elementwise chains of three [n, n] f32 inputs, eager (one kernel per op) or fused ----
// chain8: ((((-(x*y+z)).exp()*2)+1).tanh())*x, 8 ops; fma_exp: (x*y+z).exp(), 3 ops. On the fused
// device the chain is one generated kernel: 3 reads and 1 write per element, the "bytes" counted
// (and the floor report_gpu.py derives from them). "compiles_timed" counts kernels compiled inside
// the timed loop: 0 once the first call has compiled the group's kernel.
enum class Chain { Chain8, FmaExp, ExpSum };

void chain_bench(benchmark::State& state, Chain which, std::int64_t n, bool fused) {
  on_gpu(state, [&](const Device& gpu) {
    const Device device = fused ? gpu.fused() : gpu;
    device.seed(kSeed + 2);
    const auto dist = Distribution::uniform(-1, 1);
    const auto x = Tensor<2>::random({n, n}, dist, device);
    const auto y = Tensor<2>::random({n, n}, dist, device);
    const auto z = Tensor<2>::random({n, n}, dist, device);
    auto op = [&] {
      if (which == Chain::FmaExp) return (x * y + z).exp();
      if (which == Chain::ExpSum) return (x * y + z).exp().sum_dim(1);
      return ((((-(x * y + z)).exp() * 2.0) + 1.0).tanh()) * x;
    };
    auto check = [&](const Tensor<2>& got) {
      if (which == Chain::ExpSum) {
        const std::int64_t rows = 8;
        const std::vector<double> a = host(rows_of(x, 0, rows)), b = host(rows_of(y, 0, rows)),
                                  c = host(rows_of(z, 0, rows));
        std::vector<double> want(rows, 0.0);
        for (std::size_t i = 0; i < a.size(); ++i) {
          want[i / static_cast<std::size_t>(n)] += std::exp(a[i] * b[i] + c[i]);
        }
        expect_all_near(host(rows_of(got, 0, rows)), want, 1e-5, 1e-5, "exp_sum");
        return;
      }
      const std::int64_t rows = 8;
      const std::vector<double> a = host(rows_of(x, 0, rows)), b = host(rows_of(y, 0, rows)),
                                c = host(rows_of(z, 0, rows));
      std::vector<double> want(a.size());
      for (std::size_t i = 0; i < a.size(); ++i) {
        want[i] = which == Chain::FmaExp
                      ? std::exp(a[i] * b[i] + c[i])
                      : std::tanh(std::exp(-(a[i] * b[i] + c[i])) * 2 + 1) * a[i];
      }
      expect_all_near(host(rows_of(got, 0, rows)), want, 1e-6, 1e-5, "chain");
    };
    check(op());
    const std::int64_t compiles = device.kernel_stats().compiles;
    check(time_ops(state, device, 5, op));
    state.counters["compiles_timed"] =
        static_cast<double>(device.kernel_stats().compiles - compiles);
    // Eager: each op reads its tensor operands and writes one result (chain8: 11 reads + 8
    // writes; fma_exp: 4 + 3), scalars not counted. Fused: x, y, z read and the result written.
    // exp_sum: fused, x, y, z read (the row sums are n values); eager, fma_exp and the sum's read.
    const double tensors = which == Chain::ExpSum   ? (fused ? 3.0 : 8.0)
                           : fused                  ? 4.0
                           : which == Chain::Chain8 ? 19.0
                                                    : 7.0;
    state.counters["bytes"] = tensors * static_cast<double>(n * n) * 4;
  });
}

// ---- host cost of a small op ----
// A burst of 200 adds on 16 elements is timed on the host with no sync inside; the GPU then
// drains it untimed. 200 launches stay far below the driver's launch queue, so no launch waits
// for the GPU: the figure is the host's cost per op even when each tiny kernel takes longer on
// the GPU than its launch on the host. "gpu_drain_us" is the wait at the sync after each burst.
constexpr int kBurst = 200;

void small_add_host(benchmark::State& state) {
  on_gpu(state, [&](const Device& device) {
    const std::vector<float> a = host_values(16, 1), b = host_values(16, 2);
    const auto x = Tensor<1>::from_data(TensorData::from_vec(a, {16}), device);
    const auto y = Tensor<1>::from_data(TensorData::from_vec(b, {16}), device);
    std::vector<double> want(16);
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = static_cast<double>(a[i] + b[i]);
    expect_all_near(host(x + y), want, 0, 0, "small_add");
    double drain = 0, queued_total = 0;
    for (auto _ : state) {
      device.sync();
      const auto start = Clock::now();
      for (int i = 0; i < kBurst; ++i) {
        auto sum = x + y;
        benchmark::DoNotOptimize(sum.primitive().get());
      }
      const auto queued = Clock::now();
      device.sync();
      drain += seconds_since(queued);
      const double host = std::chrono::duration<double>(queued - start).count();
      queued_total += host;
      state.SetIterationTime(host / kBurst);
    }
    expect_all_near(host(x + y), want, 0, 0, "small_add");
    const auto bursts =
        static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations()));
    state.counters["gpu_drain_us"] = 1e6 * drain / bursts;
    // Burst plus drain, per op: the rate at which the driver takes launches, whichever thread
    // makes them.
    state.counters["total_us_per_op"] = 1e6 * (queued_total + drain) / bursts / kBurst;
  });
}

// ---- host cost per op of a small chain, eager or fused ----
// chain8 on [64, 64] f32, each chain flushed (on the fused device: recorded, grouped, captured and
// launched as one kernel), in bursts of 25 chains timed on the host with no sync inside, as
// small_add_host. The figure is host time per op of the chain (8 ops): the fused device's cost of
// recording an op and its share of running the group, against eager's launch of each op.
void chain8_host(benchmark::State& state, bool fused) {
  on_gpu(state, [&](const Device& gpu) {
    const Device device = fused ? gpu.fused() : gpu;
    device.seed(kSeed + 4);
    const auto dist = Distribution::uniform(-1, 1);
    const auto x = Tensor<2>::random({64, 64}, dist, device);
    const auto y = Tensor<2>::random({64, 64}, dist, device);
    const auto z = Tensor<2>::random({64, 64}, dist, device);
    auto op = [&] { return ((((-(x * y + z)).exp() * 2.0) + 1.0).tanh()) * x; };
    const std::vector<double> a = host(x), b = host(y), c = host(z);
    std::vector<double> want(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      want[i] = std::tanh(std::exp(-(a[i] * b[i] + c[i])) * 2 + 1) * a[i];
    }
    expect_all_near(host(op()), want, 1e-6, 1e-5, "chain8_host");
    constexpr int kChains = 25;
    std::vector<Tensor<2>> results;
    results.reserve(kChains);
    for (auto _ : state) {
      results.clear();
      device.sync();
      const auto start = Clock::now();
      for (int i = 0; i < kChains; ++i) {
        results.push_back(op());
        device.flush();
      }
      state.SetIterationTime(seconds_since(start) / (8 * kChains));
      device.sync();
    }
    expect_all_near(host(results.back()), want, 1e-6, 1e-5, "chain8_host");
  });
}

// ---- conv2d, ResNet 3x3 layers ----
// One row's convolution: x [32, channels, side, side], w [channels, channels, 3, 3], stride 1,
// padding 1. path: "cudnn" or "kiln" forces that path (KILN_CONV); null leaves kiln's choice per
// shape (or the caller's KILN_CONV); graph sets KILN_CUDNN_GRAPH ("0": cuDNN's legacy calls
// only). A cuDNN row without cuDNN is skipped with the reason. channels_last: x and w are
// [n, c, h, w] views of [n, h, w, c] memory (as torch's channels_last).
struct ConvRow {
  DType dtype = DType::F32;
  const char* path = nullptr;
  bool channels_last = false;
  const char* graph = nullptr;
  std::int64_t channels = 64, side = 56;
};

void conv2d(benchmark::State& state, const ConvRow& row) {
  const DType dtype = row.dtype;
  on_gpu(state, [&](const Device& device) {
    if (row.path != nullptr && std::string(row.path) == "cudnn") {
      bool loaded = false;
      const std::string why = cuda_plugin(nullptr)->cudnn_status(device.index(), &loaded, nullptr);
      if (!loaded) throw std::runtime_error("no cuDNN: " + why);
    }
    // The variables the row sets, restored after it (the plugin reads them at each op); the
    // ones it leaves null keep the caller's value.
    std::optional<test::ScopedEnv> forced, graph;
    if (row.path != nullptr) forced.emplace("KILN_CONV", row.path);
    if (row.graph != nullptr) graph.emplace("KILN_CUDNN_GRAPH", row.graph);
    const std::int64_t n = 32, c = row.channels, k = row.channels, h = row.side, w = row.side,
                       r = 3;
    device.seed(kSeed + 3);
    auto random = [&](std::int64_t d0, std::int64_t d1, std::int64_t d2, double bound) {
      return row.channels_last
                 ? Tensor<4>::random({d0, d2, d2, d1}, Distribution::uniform(-bound, bound), device,
                                     dtype)
                       .permute({0, 3, 1, 2})
                 : Tensor<4>::random({d0, d1, d2, d2}, Distribution::uniform(-bound, bound), device,
                                     dtype);
    };
    const auto x = random(n, c, h, 1);
    const auto weight = random(k, c, r, 0.1);
    const ConvOptions options{.stride = {1, 1}, .padding = {1, 1}};
    auto op = [&] { return module::conv2d(x, weight, std::nullopt, options); };
    const std::vector<double> xs = host(x), ws = host(weight);
    // 64 outputs spread over every dim (borders included) against float64 sums of the same
    // (already rounded) inputs; the bound scales with sum |x w| of each output.
    auto check = [&](const Tensor<4>& got) {
      const std::vector<double> ys = host(got);
      if (ys.size() != static_cast<std::size_t>(n * k * h * w)) {
        throw std::runtime_error("conv2d: wrong output size");
      }
      const double relative = dtype == DType::F32 ? 1e-5 : 1e-2;
      for (std::int64_t s = 0; s < 64; ++s) {
        const std::int64_t b = s % n, o = (s * 7) % k, p = (s * 13) % h, q = (s * 29) % w;
        double want = 0, magnitude = 0;
        for (std::int64_t ci = 0; ci < c; ++ci) {
          for (std::int64_t i = 0; i < r; ++i) {
            for (std::int64_t j = 0; j < r; ++j) {
              const std::int64_t py = p + i - 1, px = q + j - 1;
              if (py < 0 || py >= h || px < 0 || px >= w) continue;
              const double term = xs[static_cast<std::size_t>(((b * c + ci) * h + py) * w + px)] *
                                  ws[static_cast<std::size_t>(((o * c + ci) * r + i) * r + j)];
              want += term;
              magnitude += std::abs(term);
            }
          }
        }
        const double value = ys[static_cast<std::size_t>(((b * k + o) * h + p) * w + q)];
        if (!(std::abs(value - want) <= relative * magnitude)) {
          throw std::runtime_error("conv2d: output (" + std::to_string(b) + "," +
                                   std::to_string(o) + "," + std::to_string(p) + "," +
                                   std::to_string(q) + ") is " + std::to_string(value) + ", want " +
                                   std::to_string(want));
        }
      }
    };
    check(op());
    check(time_ops(state, device, 5, op));
    state.counters["flops"] = 2.0 * static_cast<double>(n * k * c * r * r * h * w);
  });
}

// attention/<dtype>/<seq>[/causal]: forward of batch 4, 16 heads, head dim 128 (the shape of
// issue 19's target); "flops" counts the two products, halved under the causal cut (as
// flash-attention's own benchmarks count). Eight query rows are checked against float64 sums
// over the same (rounded) inputs.
void attention_bench(benchmark::State& state, DType dtype, std::int64_t seq, bool causal) {
  on_gpu(state, [&](const Device& device) {
    const std::int64_t b = 4, h = 16, d = 128;
    device.seed(kSeed + 5);
    const auto q = Tensor<4>::random({b, h, seq, d}, Distribution::uniform(-1, 1), device, dtype);
    const auto k = Tensor<4>::random({b, h, seq, d}, Distribution::uniform(-1, 1), device, dtype);
    const auto v = Tensor<4>::random({b, h, seq, d}, Distribution::uniform(-1, 1), device, dtype);
    const AttentionOptions options{.scale = std::nullopt, .is_causal = causal};
    auto op = [&] { return module::attention(q, k, v, std::nullopt, std::nullopt, options); };
    auto rows_of = [&](const Tensor<4>& t, std::int64_t head, std::int64_t row, std::int64_t n) {
      return t
          .slice(
              {Slice::index(head / h), Slice::index(head % h), Slice(row, row + n), Slice::all()})
          .into_data()
          .to_f64_vec();
    };
    auto check = [&](const Tensor<4>& got) {
      for (std::int64_t s = 0; s < 8; ++s) {
        const std::int64_t head = (s * 11) % (b * h), row = (s * 997) % seq;
        const std::vector<double> qs = rows_of(q, head, row, 1), ks = rows_of(k, head, 0, seq),
                                  vs = rows_of(v, head, 0, seq), ys = rows_of(got, head, row, 1);
        const std::int64_t keys = causal ? row + 1 : seq;
        std::vector<double> w(static_cast<std::size_t>(keys));
        double top = -1e300, total = 0;
        for (std::int64_t j = 0; j < keys; ++j) {
          double dot = 0;
          for (std::int64_t i = 0; i < d; ++i) {
            dot += qs[static_cast<std::size_t>(i)] * ks[static_cast<std::size_t>(j * d + i)];
          }
          w[static_cast<std::size_t>(j)] = dot / std::sqrt(static_cast<double>(d));
          top = std::max(top, w[static_cast<std::size_t>(j)]);
        }
        for (double& x : w) total += (x = std::exp(x - top));
        for (std::int64_t i = 0; i < d; ++i) {
          double want = 0;
          for (std::int64_t j = 0; j < keys; ++j) {
            want += w[static_cast<std::size_t>(j)] * vs[static_cast<std::size_t>(j * d + i)];
          }
          want /= total;
          const double value = ys[static_cast<std::size_t>(i)];
          if (!(std::abs(value - want) <= 2e-2 * (1 + std::abs(want)))) {
            throw std::runtime_error("attention: head " + std::to_string(head) + " row " +
                                     std::to_string(row) + " dim " + std::to_string(i) + " is " +
                                     std::to_string(value) + ", want " + std::to_string(want));
          }
        }
      }
    };
    check(op());
    check(time_ops(state, device, 3, op));
    state.counters["flops"] =
        4.0 * static_cast<double>(b * h * seq) * static_cast<double>(seq * d) / (causal ? 2 : 1);
  });
}

// attention_fwd_bwd/<dtype>/<seq>[/causal]: attention/<dtype>/<seq>'s forward pass and its
// backward pass for a random output gradient g (dq, dk and dv through autodiff: attention's rule
// runs attention_query_backward and attention_key_value_backward). "flops" counts the forward's
// two products and the backward's five (2.5 times the forward's, as flash-attention's benchmarks
// count), halved under the causal cut. Checked on two heads through two identities of the
// softmax: the rows of dv sum to those of g (each query's weights sum to 1), and those of dk sum
// to 0 (each query's dS sums to 0). With dropout (the /dropout row, p = 0.1) only dk's identity
// holds (dS = P (dP - D) still sums to 0; the kept weights sum to 1 only on average).
void attention_fwd_bwd_bench(benchmark::State& state, DType dtype, std::int64_t seq, bool causal,
                             double dropout = 0.0) {
  on_gpu(state, [&](const Device& device) {
    const std::int64_t b = 4, h = 16, d = 128;
    const Device tracked = device.autodiff();
    tracked.seed(kSeed + 6);
    auto leaf = [&] {
      return Tensor<4>::random({b, h, seq, d}, Distribution::uniform(-1, 1), tracked, dtype)
          .require_grad();
    };
    const auto q = leaf(), k = leaf(), v = leaf();
    const auto g = Tensor<4>::random({b, h, seq, d}, Distribution::uniform(-1, 1), tracked, dtype);
    const AttentionOptions options{.scale = std::nullopt, .is_causal = causal, .dropout = dropout};
    auto op = [&] {
      const Gradients grads =
          (module::attention(q, k, v, std::nullopt, std::nullopt, options) * g).sum().backward();
      return std::make_pair(*k.grad(grads), *v.grad(grads));
    };
    auto check = [&](const std::pair<Tensor<4>, Tensor<4>>& got) {
      for (const std::int64_t head : {std::int64_t{0}, b * h - 1}) {
        auto rows = [&](const Tensor<4>& t) {
          return t
              .slice({Slice::index(head / h), Slice::index(head % h), Slice::all(), Slice::all()})
              .into_data()
              .to_f64_vec();
        };
        const std::vector<double> dk = rows(got.first), dv = rows(got.second), gs = rows(g);
        for (std::int64_t i = 0; i < d; ++i) {
          double dv_sum = 0, g_sum = 0, dk_sum = 0, dk_size = 0;
          for (std::int64_t j = 0; j < seq; ++j) {
            const auto at = static_cast<std::size_t>(j * d + i);
            dv_sum += dv[at];
            g_sum += gs[at];
            dk_sum += dk[at];
            dk_size += std::abs(dk[at]);
          }
          const bool dv_holds =
              dropout > 0 || std::abs(dv_sum - g_sum) <= 2e-2 * (1 + std::abs(g_sum));
          if (!dv_holds || !(std::abs(dk_sum) <= 2e-2 * (1 + dk_size))) {
            throw std::runtime_error("attention_fwd_bwd: head " + std::to_string(head) + " dim " +
                                     std::to_string(i) + ": dv sums to " + std::to_string(dv_sum) +
                                     " (g: " + std::to_string(g_sum) + "), dk to " +
                                     std::to_string(dk_sum) + " of " + std::to_string(dk_size));
          }
        }
      }
    };
    check(op());
    check(time_ops(state, device, 2, op));
    state.counters["flops"] =
        14.0 * static_cast<double>(b * h * seq) * static_cast<double>(seq * d) / (causal ? 2 : 1);
  });
}

// ---- topk and sort through the Tensor API (gpu_bench has the raw kiln_cuda_lib rows) ----
void tensor_topk(benchmark::State& state) {
  on_gpu(state, [&](const Device& device) {
    const std::int64_t rows = 4096, n = 32768, k = 8;
    device.seed(kSeed + 4);
    const auto x = Tensor<2>::random({rows, n}, Distribution::uniform(-1, 1), device);
    auto op = [&] { return x.topk_with_indices(k, 1); };
    auto check = [&](const std::pair<Tensor<2>, Tensor<2, Int>>& got) {
      for (const std::int64_t row : {std::int64_t{0}, std::int64_t{1}, rows / 2, rows - 1}) {
        const std::vector<double> in = host(rows_of(x, row, 1));
        const std::vector<double> values = host(rows_of(got.first, row, 1));
        const std::vector<double> indices =
            got.second.slice({Slice(row, row + 1), Slice::all()}).into_data().to_f64_vec();
        std::vector<double> want = in;
        std::partial_sort(want.begin(), want.begin() + k, want.end(), std::greater<>());
        want.resize(static_cast<std::size_t>(k));
        expect_all_near(values, want, 0, 0, "topk values");
        for (std::int64_t i = 0; i < k; ++i) {
          const double at = indices[static_cast<std::size_t>(i)];
          if (!(at >= 0 && at < n) || in[static_cast<std::size_t>(at)] != values[i]) {
            throw std::runtime_error("topk: index " + std::to_string(at) + " of row " +
                                     std::to_string(row) + " does not hold its value");
          }
        }
      }
    };
    check(op());
    check(time_ops(state, device, 2, op));
    state.counters["bytes"] = static_cast<double>(rows * n * 4 + rows * k * 12);
  });
}

void tensor_sort(benchmark::State& state) {
  on_gpu(state, [&](const Device& device) {
    const std::int64_t n = std::int64_t{1} << 24;
    device.seed(kSeed + 5);
    const auto x = Tensor<1>::random({n}, Distribution::uniform(-1, 1), device);
    auto op = [&] { return x.sort_with_indices(0); };
    // Sorted, and a permutation of the input: values[i] == x[indices[i]], every index once.
    // The input is read once per process (the seeded random repeats it, as for the sums).
    static const std::vector<double> in = host(x);
    auto check = [&](const std::pair<Tensor<1>, Tensor<1, Int>>& got) {
      const std::vector<double> values = host(got.first);
      const std::vector<double> indices = got.second.into_data().to_f64_vec();
      std::vector<bool> seen(static_cast<std::size_t>(n), false);
      for (std::size_t i = 0; i < values.size(); ++i) {
        const double at = indices[i];
        if (!(at >= 0 && at < static_cast<double>(n)) || seen[static_cast<std::size_t>(at)] ||
            in[static_cast<std::size_t>(at)] != values[i] || (i > 0 && values[i - 1] > values[i])) {
          throw std::runtime_error("sort: wrong at position " + std::to_string(i));
        }
        seen[static_cast<std::size_t>(at)] = true;
      }
    };
    check(op());
    check(time_ops(state, device, 3, op));
    state.counters["bytes"] = static_cast<double>(n * (4 + 4 + 8));
  });
}

// ---- cumsum of one long row and along the last dim of [8192, 8192] f32 ----
// Checked against float64 prefix sums of a few rows (values in [0, 1): no cancellation).
void tensor_cumsum(benchmark::State& state, std::int64_t rows, std::int64_t n) {
  on_gpu(state, [&](const Device& device) {
    device.seed(kSeed + 7);
    const auto x = Tensor<2>::random({rows, n}, Distribution::uniform(0, 1), device);
    auto op = [&] { return x.cumsum(1); };
    auto check = [&](const Tensor<2>& got) {
      for (const std::int64_t row : {std::int64_t{0}, rows - 1}) {
        const std::vector<double> in = host(rows_of(x, row, 1));
        const std::vector<double> out = host(rows_of(got, row, 1));
        double sum = 0;
        for (std::size_t i = 0; i < in.size(); ++i) {
          sum += in[i];
          if (std::abs(out[i] - sum) > 1e-5 * sum + 1e-5) {
            throw std::runtime_error("cumsum: row " + std::to_string(row) + " wrong at " +
                                     std::to_string(i));
          }
        }
      }
    };
    check(op());
    check(time_ops(state, device, 5, op));
    state.counters["bytes"] = static_cast<double>(rows * n * 8);
  });
}

// ---- NVRTC first compile and disk-cache load, each in a fresh process ----
// The child (this binary with KILN_BENCH_CACHE_CHILD=<report>) runs chain8 and a sum on small
// tensors in whatever XDG_CACHE_HOME it is given, checks the result, and writes its kernel-cache
// statistics: "ok compiles disk_hits compile_s load_s process_s" or "error <message>".
constexpr const char* kChildVariable = "KILN_BENCH_CACHE_CHILD";

int cache_child(const char* report) {
  std::ofstream out(report);
  try {
    const auto start = Clock::now();
    // KILN_BENCH_CACHE_CHILD_FUSED=1: on the fused device (the chain and its sum one group).
    const char* fused = std::getenv("KILN_BENCH_CACHE_CHILD_FUSED");
    const Device device =
        fused != nullptr && std::string(fused) == "1" ? Device::cuda(0).fused() : Device::cuda(0);
    device.seed(kSeed + 6);
    const auto dist = Distribution::uniform(-1, 1);
    const auto x = Tensor<1>::random({4096}, dist, device);
    const auto y = Tensor<1>::random({4096}, dist, device);
    const auto z = Tensor<1>::random({4096}, dist, device);
    const double got =
        ((((-(x * y + z)).exp() * 2.0) + 1.0).tanh() * x).sum().into_scalar<double>();
    const std::vector<double> a = host(x), b = host(y), c = host(z);
    double want = 0, magnitude = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double v = std::tanh(std::exp(-(a[i] * b[i] + c[i])) * 2 + 1) * a[i];
      want += v;
      magnitude += std::abs(v);
    }
    if (!(std::abs(got - want) <= 1e-5 * magnitude)) {
      throw std::runtime_error("chain8 sum is " + std::to_string(got) + ", want " +
                               std::to_string(want));
    }
    const double process = seconds_since(start);
    const KernelCacheStats s = cuda_plugin(nullptr)->kernel_cache_stats(device.index());
    out << "ok " << s.compiles << " " << s.disk_hits << " " << s.compile_seconds << " "
        << s.disk_load_seconds << " " << process << "\n";
    return 0;
  } catch (const std::exception& error) {
    out << "error " << error.what() << "\n";
    return 1;
  }
}

struct CacheRun {
  long compiles = 0, disk_hits = 0;
  double compile_s = 0, load_s = 0, process_s = 0;
};

fs::path fresh_cache_dir() {
  static int count = 0;
  const fs::path dir =
      fs::temp_directory_path() /
      ("kiln-gpu-bench-cache-" + std::to_string(::getpid()) + "-" + std::to_string(count++));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

CacheRun run_cache_child(const fs::path& cache, bool fused = false) {
  const fs::path report = cache.string() + ".report";
  const std::string command = "XDG_CACHE_HOME='" + cache.string() + "' " +
                              (fused ? "KILN_BENCH_CACHE_CHILD_FUSED=1 " : "") + kChildVariable +
                              "='" + report.string() + "' '" +
                              fs::read_symlink("/proc/self/exe").string() + "' > /dev/null 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream in(report);
  std::string word;
  in >> word;
  CacheRun run;
  if (word == "ok") {
    in >> run.compiles >> run.disk_hits >> run.compile_s >> run.load_s >> run.process_s;
  } else {
    std::string rest;
    std::getline(in, rest);
    fs::remove(report);
    throw std::runtime_error("cache child failed (status " + std::to_string(status) + "):" + rest);
  }
  fs::remove(report);
  return run;
}

// Every iteration: a child on an empty cache dir; the time is NVRTC seconds per kernel.
void nvrtc_first_compile(benchmark::State& state, bool fused) {
  on_gpu(state, [&](const Device&) {
    CacheRun total;
    for (auto _ : state) {
      const fs::path dir = fresh_cache_dir();
      const CacheRun run = run_cache_child(dir, fused);
      fs::remove_all(dir);
      if (run.compiles <= 0 || run.disk_hits != 0) {
        throw std::runtime_error("nvrtc_first_compile: an empty cache dir served kernels");
      }
      state.SetIterationTime(run.compile_s / static_cast<double>(run.compiles));
      total.compiles = run.compiles;
      total.process_s += run.process_s;
    }
    state.counters["kernels"] = static_cast<double>(total.compiles);
    state.counters["process_s"] = total.process_s / static_cast<double>(state.iterations());
  });
}

// One child fills a cache dir (once per process); every iteration is a child on that dir, and
// the time is the disk-cache load seconds per kernel.
void disk_cache_load(benchmark::State& state) {
  on_gpu(state, [&](const Device&) {
    struct Filled {
      fs::path dir = fresh_cache_dir();
      long kernels = run_cache_child(dir).compiles;
      ~Filled() { fs::remove_all(dir); }
    };
    static const Filled filled;
    if (filled.kernels <= 0)
      throw std::runtime_error("disk_cache_load: the first child compiled nothing");
    double process = 0;
    for (auto _ : state) {
      const CacheRun run = run_cache_child(filled.dir);
      if (run.compiles != 0 || run.disk_hits != filled.kernels) {
        throw std::runtime_error("disk_cache_load: " + std::to_string(run.compiles) +
                                 " compiles and " + std::to_string(run.disk_hits) +
                                 " disk hits, want 0 and " + std::to_string(filled.kernels));
      }
      state.SetIterationTime(run.load_s / static_cast<double>(run.disk_hits));
      process += run.process_s;
    }
    state.counters["kernels"] = static_cast<double>(filled.kernels);
    state.counters["process_s"] = process / static_cast<double>(state.iterations());
  });
}

void register_all() {
  using benchmark::RegisterBenchmark;
  auto timed = [](benchmark::internal::Benchmark* b, int iterations) {
    b->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(iterations);
  };
  const char* sums[] = {"sum/8192/all", "sum/8192/dim1", "sum/8192/dim0"};
  for (int which = 0; which < 3; ++which) {
    timed(RegisterBenchmark(sums[which], [which](benchmark::State& s) { sum_bench(s, which); }), 5);
  }
  timed(RegisterBenchmark("softmax/8192", [](benchmark::State& s) { softmax_bench(s, false); }), 5);
  timed(RegisterBenchmark("log_softmax/8192", [](benchmark::State& s) { softmax_bench(s, true); }),
        5);
  timed(RegisterBenchmark("layer_norm/8192", layer_norm_bench, kSumN, kSumN), 5);
  // A transformer's rows (BERT-base's width): a warp per row, several rows per block.
  timed(RegisterBenchmark("layer_norm/65536x768", layer_norm_bench, 65536, 768), 5);
  for (const std::int64_t n : {4096, 8192}) {
    for (const bool fused : {false, true}) {
      const std::string suffix = (fused ? "_fused/" : "/") + std::to_string(n);
      timed(
          RegisterBenchmark(("chain8" + suffix).c_str(),
                            [=](benchmark::State& s) { chain_bench(s, Chain::Chain8, n, fused); }),
          5);
      if (n == 8192) {
        timed(RegisterBenchmark(
                  ("fma_exp" + suffix).c_str(),
                  [=](benchmark::State& s) { chain_bench(s, Chain::FmaExp, n, fused); }),
              5);
        // A chain ending in a reduction: on the fused device the sum's kernel evaluates it.
        timed(RegisterBenchmark(
                  ("exp_sum" + suffix).c_str(),
                  [=](benchmark::State& s) { chain_bench(s, Chain::ExpSum, n, fused); }),
              5);
      }
    }
  }
  timed(RegisterBenchmark("small_add_host/16", small_add_host), 50);
  timed(RegisterBenchmark("chain8_host/64", chain8_host, false), 20);
  timed(RegisterBenchmark("chain8_host_fused/64", chain8_host, true), 20);
  for (const std::int64_t seq : {4096, 16384}) {
    for (const bool causal : {false, true}) {
      const std::string name = "attention/bf16/" + std::to_string(seq) + (causal ? "/causal" : "");
      timed(RegisterBenchmark(
                name.c_str(),
                [=](benchmark::State& s) { attention_bench(s, DType::BF16, seq, causal); }),
            3);
      const std::string both =
          "attention_fwd_bwd/bf16/" + std::to_string(seq) + (causal ? "/causal" : "");
      timed(RegisterBenchmark(
                both.c_str(),
                [=](benchmark::State& s) { attention_fwd_bwd_bench(s, DType::BF16, seq, causal); }),
            3);
    }
  }
  timed(RegisterBenchmark(
            "attention_fwd_bwd/bf16/4096/dropout",
            [](benchmark::State& s) { attention_fwd_bwd_bench(s, DType::BF16, 4096, false, 0.1); }),
        3);
  // conv2d/<dtype> as the caller's KILN_CONV has it (kiln's own path when unset, the choice per
  // shape with auto; the row torch's peer has); /cudnn and /kiln each path forced; /legacy
  // cuDNN's legacy calls alone (KILN_CUDNN_GRAPH=0).
  auto conv_row = [&](const std::string& name, const ConvRow& row) {
    timed(RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { conv2d(s, row); }), 5);
  };
  for (const DType dtype : {DType::F32, DType::BF16}) {
    for (const char* path : {static_cast<const char*>(nullptr), "cudnn", "kiln"}) {
      conv_row("conv2d/" + std::string(dtype_name(dtype)) +
                   (path != nullptr ? std::string("/") + path : ""),
               {.dtype = dtype, .path = path});
    }
  }
  conv_row("conv2d/bf16/legacy", {.dtype = DType::BF16, .path = "cudnn", .graph = "0"});
  conv_row("conv2d/bf16/nhwc", {.dtype = DType::BF16, .channels_last = true});
  conv_row("conv2d/bf16/nhwc/legacy",
           {.dtype = DType::BF16, .path = "cudnn", .channels_last = true, .graph = "0"});
  // ResNet-50's other 3x3 layers at batch 32, channels-last as torch's own benchmarks run them.
  for (const auto& [channels, side] :
       {std::pair<std::int64_t, std::int64_t>{128, 28}, {256, 14}, {512, 7}}) {
    conv_row("conv2d/bf16/nhwc/" + std::to_string(channels) + "x" + std::to_string(side),
             {.dtype = DType::BF16, .channels_last = true, .channels = channels, .side = side});
  }
  timed(RegisterBenchmark("tensor_topk/4096/32768/8", tensor_topk), 5);
  timed(RegisterBenchmark("tensor_sort/16777216", tensor_sort), 5);
  timed(RegisterBenchmark("tensor_cumsum/16777216/0",
                          [](benchmark::State& s) { tensor_cumsum(s, 1, std::int64_t{1} << 24); }),
        5);
  timed(RegisterBenchmark("tensor_cumsum/8192/8192",
                          [](benchmark::State& s) { tensor_cumsum(s, 8192, 8192); }),
        5);
  // A child process per iteration (a CUDA context and NVRTC each): few repetitions.
  timed(RegisterBenchmark("nvrtc_first_compile", nvrtc_first_compile, false)->Repetitions(3), 1);
  timed(RegisterBenchmark("nvrtc_first_compile_fused", nvrtc_first_compile, true)->Repetitions(3),
        1);
  timed(RegisterBenchmark("disk_cache_load", disk_cache_load)->Repetitions(3), 1);
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* report = std::getenv(kChildVariable)) return cache_child(report);
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
