// all_reduce bandwidth: 256 MiB of f32 (and smaller sizes) summed across the ranks of a process
// group, reported as nccl-tests does: algbw = bytes / time and busbw = algbw * 2 (n - 1) / n, the
// bandwidth each rank's link carries in a ring. On the CPU over Gloo; with KILN_BENCH_DEVICE=cuda
// on GPUs over NCCL (src/backends/cuda/nccl_transport.h), against bench/peer_torch_nccl.py.
//
//   build/tools/kiln/kiln launch --nproc 2 -- build/bench/dist_bench    # 2 processes
//   build/bench/dist_bench                                              # 2 threads of one process
//   KILN_BENCH_DEVICE=cuda build/bench/dist_bench                       # cuda:0 and cuda:1
//   KILN_BENCH_DEVICE=cuda build/tools/kiln/kiln launch --nproc 2 -- build/bench/dist_bench
//                                                   # a process per GPU, rank r on cuda:r
//
// Every rank runs the same fixed number of iterations (Google Benchmark's adaptive count could
// differ between ranks and mismatch the collectives); rank 0 prints the table (and writes
// --benchmark_out, which the other ranks ignore). On the CPU each iteration is one all_reduce,
// read back; on GPUs ten all_reduces queued one after the other, the last read back, as
// nccl-tests and the peer time theirs (a read per call would time the host's round trip).
#include <benchmark/benchmark.h>
#include <kiln/distributed.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
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

bool on_gpus() {
  const char* device = std::getenv("KILN_BENCH_DEVICE");
  return device != nullptr && std::strcmp(device, "cuda") == 0;
}

// All-reduces per timed iteration: one on the CPU, ten queued on GPUs.
int calls_per_iteration() { return on_gpus() ? 10 : 1; }

void report(benchmark::State& state, std::int64_t bytes, int size) {
  const double per_call =
      static_cast<double>(bytes) * static_cast<double>(state.iterations()) * calls_per_iteration();
  state.counters["algbw"] =
      benchmark::Counter(per_call, benchmark::Counter::kIsRate, benchmark::Counter::kIs1024);
  state.counters["busbw"] = benchmark::Counter(
      per_call * 2.0 * (size - 1) / size, benchmark::Counter::kIsRate, benchmark::Counter::kIs1024);
  state.counters["ranks"] = size;
  state.counters["calls"] = calls_per_iteration();
}

// One iteration: the all-reduces of x, the last read back.
void all_reduce_iteration(const Tensor<1>& x, const ProcessGroup& group) {
  Tensor<1> sum = distributed::all_reduce(x, group);
  for (int call = 1; call < calls_per_iteration(); ++call) sum = distributed::all_reduce(x, group);
  bench::read_one(sum);
}

// One rank's loop on its group's device: x summed across group, timed by state on the rank that
// has one; checked once first: every element is the sum of 1..size (on GPUs this first call
// also sets NCCL up).
void all_reduce_loop(benchmark::State* state, const ProcessGroup& group, std::int64_t bytes,
                     benchmark::IterationCount iterations) {
  const auto x = Tensor<1>::full({bytes / 4}, group.rank() + 1.0, group.device());
  const double want = group.size() * (group.size() + 1) / 2.0;
  bench::expect_near(bench::read_one(distributed::all_reduce(x, group)), want, 0, "all_reduce");
  all_reduce_iteration(x, group);  // warm: the allocator's blocks, NCCL's buffers
  group.barrier();
  if (state != nullptr) {
    for (auto _ : *state) all_reduce_iteration(x, group);
    return;
  }
  for (benchmark::IterationCount i = 0; i < iterations; ++i) all_reduce_iteration(x, group);
}

void BM_AllReduceProcesses(benchmark::State& state) {
  bench::guarded(state, [&] {
    const ProcessGroup& group = *launched_group();
    all_reduce_loop(&state, group, state.range(0) * kMiB, 0);
    report(state, state.range(0) * kMiB, group.size());
  });
}

// Two ranks in this process (on the CPU, or cuda:0 and cuda:1): rank 1 runs on a thread of its
// own, iteration for iteration.
void BM_AllReduceThreads(benchmark::State& state) {
  bench::guarded(state, [&] {
    const std::int64_t bytes = state.range(0) * kMiB;
    if (on_gpus() && Device::count(DeviceKind::Cuda) < 2) {
      throw std::runtime_error("two ranks on GPUs need two GPUs, found " +
                               std::to_string(Device::count(DeviceKind::Cuda)));
    }
    const std::vector<ProcessGroup> groups =
        on_gpus() ? ProcessGroup::threads({Device::cuda(0), Device::cuda(1)})
                  : ProcessGroup::threads(2);
    std::exception_ptr failed;
    std::thread other([&] {
      try {
        all_reduce_loop(nullptr, groups[1], bytes, state.max_iterations);
      } catch (...) {
        failed = std::current_exception();
      }
    });
    try {
      all_reduce_loop(&state, groups[0], bytes, 0);
    } catch (...) {
      other.join();
      throw;
    }
    other.join();
    if (failed) std::rethrow_exception(failed);
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
void register_sizes(const std::string& name, void (*run)(benchmark::State&)) {
  for (std::int64_t mib : {1, 16, 256}) {
    const int iterations = mib == 256 ? 5 : (on_gpus() ? 50 : 20);
    benchmark::RegisterBenchmark(name.c_str(), run)
        ->Arg(mib)
        ->Iterations(iterations)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
}

// The device of this rank under `kiln launch`: a GPU per local rank on GPUs, else the CPU.
Device launched_device() {
  if (!on_gpus()) return Device::cpu();
  const char* local = std::getenv("KILN_LOCAL_RANK");
  const int rank = local != nullptr ? std::atoi(local) : 0;
  return Device::cuda(rank % std::max(1, Device::count(DeviceKind::Cuda)));
}

}  // namespace

int main(int argc, char** argv) {
  const bool launched = std::getenv("KILN_WORLD_SIZE") != nullptr;
  // Only rank 0 writes --benchmark_out: the other ranks drop the flags before Google Benchmark
  // reads them.
  const char* rank = std::getenv("KILN_RANK");
  if (launched && rank != nullptr && std::strcmp(rank, "0") != 0) {
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
      if (std::strncmp(argv[i], "--benchmark_out", 15) != 0) argv[kept++] = argv[i];
    }
    argc = kept;
  }
  benchmark::Initialize(&argc, argv);
  const std::string device = on_gpus() ? "cuda/" : "";
  if (!launched) {
    register_sizes("all_reduce_f32/" + device + "threads", BM_AllReduceThreads);
    benchmark::RunSpecifiedBenchmarks();
  } else {
    try {
      launched_group() = ProcessGroup::from_env(launched_device());
    } catch (const std::exception& error) {
      std::fprintf(stderr, "dist_bench: %s\n", error.what());
      return 1;
    }
    register_sizes("all_reduce_f32/" + device + "processes", BM_AllReduceProcesses);
    // Rank 0 prints; the others run the same iterations quietly.
    Silent silent;
    if (launched_group()->rank() == 0) {
      benchmark::RunSpecifiedBenchmarks();
    } else {
      benchmark::RunSpecifiedBenchmarks(&silent);
    }
    // The group (and its NCCL communicator) ends before main returns, not among the static
    // destructors, where NCCL's own runtime may already be gone.
    launched_group().reset();
  }
  benchmark::Shutdown();
  return 0;
}
