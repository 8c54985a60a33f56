// Benchmarks of the remote backend against a `kiln serve` on loopback (bench/run_remote.sh starts
// the server and sets KILN_BENCH_REMOTE=remote://127.0.0.1:PORT and KILN_REMOTE_TOKEN):
// - small_ops/N: N adds of 16 f32 elements issued from the client, then one element read back:
//   the cost per op as the client sees it (the server runs them meanwhile; the read waits for
//   the last one). remote and local (the CPU device in this process) side by side.
// - upload/MB: Tensor::from_data of MB megabytes of f32 whose content changes every iteration
//   (no cache hit), then a sync (the server holds it): bytes/s on the wire into the server's
//   memory. The
//   TensorData handed over is copied before the timed region (the caller's copy, which a local
//   device takes as well).
// - upload_repeated/MB: the same content again each iteration: one hash on the client and a
//   cache hit on the server.
// - mlp_step through remote is autodiff_bench's mlp_step with KILN_BENCH_DEVICE set to the
//   server (run_remote.sh runs both and prints the ratio).
#include <benchmark/benchmark.h>
#include <kiln/kiln.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "bench_common.h"

namespace {

using namespace kiln;
using namespace kiln::bench;

Device remote_device() {
  const char* url = std::getenv("KILN_BENCH_REMOTE");
  if (url == nullptr || *url == '\0') {
    throw std::runtime_error("KILN_BENCH_REMOTE is not set (bench/run_remote.sh sets it)");
  }
  return Device::remote(url);
}

void small_ops_on(benchmark::State& state, bool remote) {
  guarded(state, [&] {
    const Device device = remote ? remote_device() : Device::cpu();
    const std::int64_t n = state.range(0);
    const std::vector<float> a = host_values(16, 1), b = host_values(16, 2);
    const auto x = Tensor<1>::from_data(TensorData::from_vec(a, {16}), device);
    const auto y = Tensor<1>::from_data(TensorData::from_vec(b, {16}), device);
    expect_near(read_one(x + y), a[0] + b[0], 1e-6, "small_ops");
    for (auto _ : state) {
      Tensor<1> last = x;
      for (std::int64_t i = 0; i < n; ++i) last = x + y;
      benchmark::DoNotOptimize(read_one(last));
    }
    state.counters["us_per_op"] = benchmark::Counter(
        static_cast<double>(n) * 1e-6,
        benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  });
}
void small_ops_remote(benchmark::State& state) { small_ops_on(state, true); }
void small_ops_local(benchmark::State& state) { small_ops_on(state, false); }
BENCHMARK(small_ops_remote)->Arg(10000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(small_ops_local)->Arg(10000)->Unit(benchmark::kMillisecond)->UseRealTime();

void upload_on(benchmark::State& state, bool repeated) {
  guarded(state, [&] {
    const Device device = remote_device();
    const std::int64_t n = state.range(0) * (1 << 20) / 4;
    std::vector<float> host = host_values(n, 7);
    TensorData data = TensorData::from_vec(host, {n});
    float* first = reinterpret_cast<float*>(data.bytes().data());
    // Counts across repetitions (each calls this again in the same session): a count from 0 in
    // each would repeat the first repetition's contents, which the server then has cached.
    static std::int64_t iteration = 0;
    {
      const auto t = Tensor<1>::from_data(data, device);
      expect_near(read_one(t), host[0], 0, "upload");
    }
    for (auto _ : state) {
      // The caller's copy of its data is made outside the timed region (a local device would
      // take it too): what is timed is the upload itself. A new first element each time gives
      // another content, so no cache hit.
      state.PauseTiming();
      if (!repeated) *first = static_cast<float>(++iteration);
      TensorData copy = data;
      state.ResumeTiming();
      const auto t = Tensor<1>::from_data(std::move(copy), device);
      // Waits for the server to hold it, without a view: a view of a tensor bound from the
      // upload cache would copy it (its storage is the cache's), which is not the upload's cost.
      device.sync();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * n * 4);
  });
}
void upload(benchmark::State& state) { upload_on(state, false); }
void upload_repeated(benchmark::State& state) { upload_on(state, true); }
BENCHMARK(upload)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(upload_repeated)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
