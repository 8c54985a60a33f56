// CPU benchmarks of the ops behind the reduction, scan, sort and pool kernels, one row per path of
// their drivers: full reductions (contiguous and strided), along the last dim (one line per
// output) and the first (column blocks), f32 and the 16-bit and integer kernels; cumulative ops
// both ways; sorts of many rows; 2-D pools. No peer: these rows compare kiln with itself, A/B
// across a change (run the old and new builds alternately, --benchmark_repetitions).
#include <benchmark/benchmark.h>
#include <kiln/kiln.h>

#include <functional>
#include <string>
#include <vector>

#include "bench_common.h"

namespace {

using namespace kiln;
using namespace kiln::bench;

const Device kDevice = Device::cpu();
constexpr std::int64_t kSide = 4096;

// Forces the op behind t to completion by reading one element, of any kind.
template <std::size_t D, class K>
void force(const Tensor<D, K>& t) {
  std::vector<Slice> first(D, Slice(0, 1));
  benchmark::DoNotOptimize(t.slice(first).into_data());
}

// One row: an op on a rows x cols matrix of dtype (its transpose when transposed).
struct Row {
  const char* name;
  std::int64_t rows, cols;
  DType dtype;
  bool transposed;
  std::function<void(const Tensor<2>&)> op;
};

const Row kRows[] = {
    {"sum_all", kSide, kSide, DType::F32, false, [](const Tensor<2>& x) { force(x.sum()); }},
    {"sum_all_transposed", kSide, kSide, DType::F32, true,
     [](const Tensor<2>& x) { force(x.sum()); }},
    {"sum_last", kSide, kSide, DType::F32, false, [](const Tensor<2>& x) { force(x.sum_dim(1)); }},
    {"sum_first", kSide, kSide, DType::F32, false, [](const Tensor<2>& x) { force(x.sum_dim(0)); }},
    {"mean_last", kSide, kSide, DType::F32, false,
     [](const Tensor<2>& x) { force(x.mean_dim(1)); }},
    {"sum_last_bf16", kSide, kSide, DType::BF16, false,
     [](const Tensor<2>& x) { force(x.sum_dim(1)); }},
    {"max_all", kSide, kSide, DType::F32, false, [](const Tensor<2>& x) { force(x.max()); }},
    {"max_last", kSide, kSide, DType::F32, false, [](const Tensor<2>& x) { force(x.max_dim(1)); }},
    {"max_first", kSide, kSide, DType::F32, false, [](const Tensor<2>& x) { force(x.max_dim(0)); }},
    {"argmax_last", kSide, kSide, DType::F32, false,
     [](const Tensor<2>& x) { force(x.argmax(1)); }},
    {"argmax_first", kSide, kSide, DType::F32, false,
     [](const Tensor<2>& x) { force(x.argmax(0)); }},
    {"cumsum_last", kSide, kSide, DType::F32, false,
     [](const Tensor<2>& x) { force(x.cumsum(1)); }},
    {"cumsum_first", kSide, kSide, DType::F32, false,
     [](const Tensor<2>& x) { force(x.cumsum(0)); }},
    {"sort_last", 1024, kSide, DType::F32, false, [](const Tensor<2>& x) { force(x.sort(1)); }},
    {"argsort_last", 1024, kSide, DType::F32, false,
     [](const Tensor<2>& x) { force(x.argsort(1)); }},
};

void run_row(benchmark::State& state, const Row& row) {
  guarded(state, [&] {
    auto x = Tensor<2>::random({row.rows, row.cols}, Distribution::uniform(-1, 1), kDevice);
    if (row.dtype != DType::F32) x = x.cast(row.dtype);
    if (row.transposed) x = x.transpose();
    state.counters["bytes"] =
        static_cast<double>(row.rows * row.cols) * static_cast<double>(dtype_size(row.dtype));
    row.op(x);
    for (auto _ : state) row.op(x);
  });
}

// The integer kernels: sums of i32 values from [-100, 100).
void sum_last_i32(benchmark::State& state) {
  guarded(state, [&] {
    auto x = (Tensor<2>::random({kSide, kSide}, Distribution::uniform(-1, 1), kDevice) * 100.0)
                 .int_()
                 .cast(DType::I32);
    state.counters["bytes"] = 4.0 * kSide * kSide;
    force(x.sum_dim(1));
    for (auto _ : state) force(x.sum_dim(1));
  });
}

// 2-D pools of 16 x 64 planes of 112 x 112.
void run_pool(benchmark::State& state, const PoolOptions& options, bool average) {
  guarded(state, [&] {
    auto x = Tensor<4>::random({16, 64, 112, 112}, Distribution::uniform(-1, 1), kDevice);
    state.counters["bytes"] = 4.0 * 16 * 64 * 112 * 112;
    auto op = [&] {
      force(average ? module::avg_pool2d(x, options) : module::max_pool2d(x, options));
    };
    op();
    for (auto _ : state) op();
  });
}

const int kRegistered = [] {
  auto settings = [](benchmark::internal::Benchmark* b) {
    b->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);
  };
  for (const Row& row : kRows) {
    settings(
        benchmark::RegisterBenchmark(row.name, [&row](benchmark::State& s) { run_row(s, row); }));
  }
  settings(benchmark::RegisterBenchmark("sum_last_i32", sum_last_i32));
  settings(benchmark::RegisterBenchmark("max_pool", [](benchmark::State& s) {
    run_pool(s, {.kernel_size = {2, 2}}, false);
  }));
  settings(benchmark::RegisterBenchmark("avg_pool", [](benchmark::State& s) {
    run_pool(s, {.kernel_size = {3, 3}, .stride = {2, 2}}, true);
  }));
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
