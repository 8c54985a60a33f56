// all_reduce bandwidth over Gloo on the CPU: 256 MB of f32 (and smaller sizes) summed across the
// ranks of a process group, reported as nccl-tests does: algbw = bytes / time and
// busbw = algbw * 2 (n - 1) / n, the bandwidth each rank's link carries in a ring.
//
//   build/tools/kiln/kiln launch --nproc 2 -- build/bench/dist_bench    # 2 processes
//   build/bench/dist_bench                                              # 2 threads of one process
//
// Every rank runs the same fixed number of iterations (Google Benchmark's adaptive count could
// differ between ranks and mismatch the collectives); rank 0 prints the table.
#include <benchmark/benchmark.h>
#include <kiln/distributed.h>
#include <kiln/kiln.h>

#include <cstdlib>
#include <optional>
#include <thread>

#include "bench_common.h"

namespace {

using namespace kiln;

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

// The group this process is a rank of, under `kiln launch`; else none.
std::optional<ProcessGroup>& launched_group() {
  static std::optional<ProcessGroup> group;
  return group;
}

void report(benchmark::State& state, std::int64_t bytes, int size) {
  const double per_call = static_cast<double>(bytes) * static_cast<double>(state.iterations());
  state.counters["algbw"] =
      benchmark::Counter(per_call, benchmark::Counter::kIsRate, benchmark::Counter::kIs1024);
  state.counters["busbw"] = benchmark::Counter(
      per_call * 2.0 * (size - 1) / size, benchmark::Counter::kIsRate, benchmark::Counter::kIs1024);
  state.counters["ranks"] = size;
}

// One rank's loop: x summed across group, each result read back (a lazy backend would
// otherwise time nothing), timed by state on the rank that has one; checked once first: every
// element is the sum of 1..size.
void all_reduce_loop(benchmark::State* state, const ProcessGroup& group, std::int64_t bytes,
                     benchmark::IterationCount iterations) {
  const auto x = Tensor<1>::full({bytes / 4}, group.rank() + 1.0, Device::cpu());
  const double want = group.size() * (group.size() + 1) / 2.0;
  bench::expect_near(bench::read_one(distributed::all_reduce(x, group)), want, 0, "all_reduce");
  group.barrier();
  if (state != nullptr) {
    for (auto _ : *state) bench::read_one(distributed::all_reduce(x, group));
    return;
  }
  for (benchmark::IterationCount i = 0; i < iterations; ++i) {
    bench::read_one(distributed::all_reduce(x, group));
  }
}

void BM_AllReduceProcesses(benchmark::State& state) {
  bench::guarded(state, [&] {
    const ProcessGroup& group = *launched_group();
    all_reduce_loop(&state, group, state.range(0) * kMiB, 0);
    report(state, state.range(0) * kMiB, group.size());
  });
}

// Two ranks in this process: rank 1 runs on a thread of its own, iteration for iteration.
void BM_AllReduceThreads(benchmark::State& state) {
  bench::guarded(state, [&] {
    const std::int64_t bytes = state.range(0) * kMiB;
    const std::vector<ProcessGroup> groups = ProcessGroup::threads(2);
    std::thread other([&] { all_reduce_loop(nullptr, groups[1], bytes, state.max_iterations); });
    all_reduce_loop(&state, groups[0], bytes, 0);
    other.join();
    report(state, bytes, 2);
  });
}

// What the ranks other than 0 report: nothing.
class Silent : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

// 1, 16 and 256 MiB, with a fixed count of iterations (the same on every rank).
void register_sizes(const char* name, void (*run)(benchmark::State&)) {
  for (std::int64_t mib : {1, 16, 256}) {
    benchmark::RegisterBenchmark(name, run)
        ->Arg(mib)
        ->Iterations(mib == 256 ? 5 : 20)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (std::getenv("KILN_WORLD_SIZE") == nullptr) {
    register_sizes("all_reduce_f32/threads", BM_AllReduceThreads);
    benchmark::RunSpecifiedBenchmarks();
  } else {
    launched_group() = ProcessGroup::from_env(Device::cpu());
    register_sizes("all_reduce_f32/processes", BM_AllReduceProcesses);
    // Rank 0 prints; the others run the same iterations quietly.
    Silent silent;
    if (launched_group()->rank() == 0) {
      benchmark::RunSpecifiedBenchmarks();
    } else {
      benchmark::RunSpecifiedBenchmarks(&silent);
    }
  }
  benchmark::Shutdown();
  return 0;
}
