// The machine's float FMA peak: each thread runs 12 independent chains of 512-bit fused
// multiply-adds (enough to cover the FMA units' latency), on 1 thread and then on every core.
// What the benchmarks' product floors compare with when kiln's own matmul is the fastest
// product measured (on the 2-core Zen 5 of the development machine: 286 GFLOP/s per core, 571
// for both; OpenBLAS held to AVX2 by OPENBLAS_CORETYPE=Haswell reaches half of it). A probe, not
// part of kiln.
//   g++ -O2 -march=native bench/probe/fma_peak.cpp -o fma_peak -pthread && ./fma_peak
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

namespace {

constexpr int kChains = 12;
constexpr long kIterations = 200'000'000;

float run_chains() {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(1.0f + static_cast<float>(i) * 1e-3f);
  const __m512 scale = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < kIterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], scale, add);
  }
  __m512 sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm512_add_ps(sum, acc[i]);
  return _mm512_reduce_add_ps(sum);  // used, so the chains are not optimised away
}

}  // namespace

int main() {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned threads : {1u, cores}) {
    std::vector<float> sinks(threads);
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < threads; ++t)
      workers.emplace_back([&, t] { sinks[t] = run_chains(); });
    for (std::thread& w : workers) w.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double flops = 2.0 * 16 * kChains * static_cast<double>(kIterations) * threads;
    std::printf("%u thread%s: %.1f GFLOP/s (checksum %g)\n", threads, threads == 1 ? "" : "s",
                flops / seconds / 1e9, static_cast<double>(sinks[0]));
  }
}
