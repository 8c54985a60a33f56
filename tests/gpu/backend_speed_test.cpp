// Rough speed figures of the backend's own kernels, printed as "[speed]" lines for
// scripts/gpu-check (the benchmarks proper live in bench/). Checks only that results are right;
// the numbers are for the report.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "gpu/gpu_test_support.h"

using namespace kiln;

namespace {

template <class F>
double median_seconds(int repeats, F&& f) {
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    f();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

TEST(GpuSpeed, SmallOpHostCost) {
  KILN_REQUIRE_GPU();
  auto x = Tensor<1>::ones({16}, device);
  auto y = Tensor<1>::ones({16}, device);
  (void)(x + y).into_data();  // compile and warm up
  // Bursts shorter than the launch queue, each after a sync: the time is the host's, not the
  // GPU's (a long loop of tiny kernels measures the GPU's per-kernel time once the queue fills).
  constexpr int kBurst = 200;
  std::vector<double> bursts;
  for (int r = 0; r < 50; ++r) {
    device.sync();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kBurst; ++i) {
      auto z = x + y;
    }
    bursts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kBurst);
  }
  std::sort(bursts.begin(), bursts.end());
  const double host = bursts[bursts.size() / 2];
  constexpr int kOps = 20000;
  device.sync();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kOps; ++i) {
    auto z = x + y;
  }
  device.sync();
  const double throughput = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kOps;
  std::printf("[speed] small_add (16 f32): %.2f us host cost per op (bursts of %d), %.2f us per op "
              "sustained (%d ops, GPU-bound)\n",
              1e6 * host, kBurst, 1e6 * throughput, kOps);
}

TEST(GpuSpeed, Chain8AndSum) {
  KILN_REQUIRE_GPU();
  const std::int64_t n = 4096;
  device.seed(1);
  auto x = Tensor<2>::random({n, n}, Distribution::standard(), device);
  auto y = Tensor<2>::random({n, n}, Distribution::standard(), device);
  auto z = Tensor<2>::random({n, n}, Distribution::standard(), device);
  auto chain8 = [&] { return ((((-(x * y + z)).exp() * 2.0) + 1.0).tanh()) * x; };
  (void)chain8().into_data();
  const double chain = median_seconds(20, [&] {
    auto r = chain8();
    device.sync();
  });
  // Per op: read 1-2 inputs, write 1 output (8 ops: 13 reads + 8 writes of n*n f32).
  const double bytes = 21.0 * n * n * 4;
  std::printf("[speed] chain8 4096^2 f32 eager: %.3f ms (%.0f GB/s effective)\n", 1e3 * chain,
              bytes / chain / 1e9);
  auto copy = [&] { return x + 0.0; };
  const double add = median_seconds(20, [&] {
    auto r = copy();
    device.sync();
  });
  std::printf("[speed] add_scalar 4096^2 f32: %.3f ms (%.0f GB/s read+write)\n", 1e3 * add,
              8.0 * n * n / add / 1e9);
  auto big = Tensor<2>::random({8192, 8192}, Distribution::standard(), device);
  const double full = median_seconds(20, [&] {
    auto s = big.sum();
    device.sync();
  });
  const double rows = median_seconds(20, [&] {
    auto s = big.sum_dim(1);
    device.sync();
  });
  const double cols = median_seconds(20, [&] {
    auto s = big.sum_dim(0);
    device.sync();
  });
  const double gb = 8192.0 * 8192 * 4 / 1e9;
  std::printf("[speed] sum 8192^2 f32: full %.3f ms (%.0f GB/s), last dim %.3f ms (%.0f GB/s), "
              "first dim %.3f ms (%.0f GB/s)\n",
              1e3 * full, gb / full, 1e3 * rows, gb / rows, 1e3 * cols, gb / cols);
  const double total = big.sum().into_data().to_vec<float>()[0];
  EXPECT_NEAR(total / (8192.0 * 8192.0), 0.5, 0.01);
}
