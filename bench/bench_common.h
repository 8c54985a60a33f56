// What every kiln benchmark binary shares: spot checks that fail a benchmark when its result is
// wrong (so a fast wrong kernel cannot pass), skipping a benchmark whose op has not landed yet,
// deterministic host values, and a one-element read-back that forces an op to finish.
#pragma once

#include <benchmark/benchmark.h>
#include <kiln/kiln.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln::bench {

// Forces the op behind t to completion by reading one element.
template <std::size_t D>
float read_one(const Tensor<D>& t) {
  std::vector<Slice> first(D, Slice(0, 1));
  return static_cast<float>(t.slice(first).into_data().to_f64_vec()[0]);
}

inline void expect_near(double got, double want, double tolerance, const char* what) {
  if (!(std::abs(got - want) <= tolerance * std::max(1.0, std::abs(want)))) {
    throw std::runtime_error(std::string(what) + ": got " + std::to_string(got) + ", want " +
                             std::to_string(want));
  }
}

// Runs a whole benchmark (set-up, spot check, timed loop): a kiln::Error (an op another branch
// has not landed yet) or a failed spot check skips this benchmark, so the others still run.
template <class Body>
void guarded(benchmark::State& state, Body&& body) {
  try {
    body();
  } catch (const std::exception& error) {
    state.SkipWithError(error.what());
  }
}

// n values in [-0.5, 0.5) from a linear congruential generator.
inline std::vector<float> host_values(std::int64_t n, std::uint32_t seed) {
  std::vector<float> out(static_cast<std::size_t>(n));
  std::uint32_t x = seed;
  for (float& v : out) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<float>(x >> 8) / static_cast<float>(1u << 24) - 0.5f;  // [-0.5, 0.5)
  }
  return out;
}

// std::memcpy of count floats split over the OpenMP threads: the copy bandwidth baseline.
inline void parallel_memcpy(float* target, const float* source, std::size_t count) {
#pragma omp parallel
  {
    const std::size_t threads = static_cast<std::size_t>(omp_get_num_threads());
    const std::size_t t = static_cast<std::size_t>(omp_get_thread_num());
    const std::size_t begin = count * t / threads, end = count * (t + 1) / threads;
    std::memcpy(target + begin, source + begin, (end - begin) * sizeof(float));
  }
}

// The timed loop of a memcpy baseline: count floats copied per iteration.
inline void time_parallel_memcpy(benchmark::State& state, std::size_t count) {
  const std::vector<float> source = host_values(static_cast<std::int64_t>(count), 5);
  std::vector<float> target(count);
  for (auto _ : state) {
    parallel_memcpy(target.data(), source.data(), count);
    benchmark::DoNotOptimize(target.data());
    benchmark::ClobberMemory();
  }
}

}  // namespace kiln::bench
