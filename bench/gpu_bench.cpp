// GPU workloads of DESIGN.md §8 on kiln_cuda_lib's raw-pointer functions, timed with CUDA events
// (manual time per iteration; run with --benchmark_repetitions and read the median). Counters
// per iteration: "flops" for products, "bytes" (read + written) for memory-bound work, so
// bench/report_gpu.py can print floors. memcpy_d2d measures the copy bandwidth those floors use.
// bench/run_gpu.sh runs this and bench/peer_torch_gpu.py in one go and prints the table.
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/cuda/check.h"
#include "backends/cuda/lib/matmul.h"
#include "backends/cuda/lib/sort.h"
#include "backends/cuda/lib/sort_detail.h"
#include "kiln/half.h"

namespace {

using namespace kiln;
using namespace kiln::cuda::lib;

bool have_device() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return false;
  }
  return true;
}

// One device allocation for the life of a benchmark.
struct Buffer {
  void* data = nullptr;
  explicit Buffer(std::size_t bytes) {
    if (bytes != 0) KILN_CUDA_CHECK("bench", cudaMalloc(&data, bytes));
  }
  ~Buffer() {
    if (data != nullptr) cudaFree(data);
  }
  Buffer(Buffer&& other) noexcept : data(other.data) { other.data = nullptr; }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer& operator=(Buffer&&) = delete;
};

// Random values in [-1, 1) of dtype, uploaded (never zeros: they run faster than real data).
// Drawn as torch.rand(...) * 2 - 1 draws them (24 random bits, so multiples of 2^-23): the peer's
// operands have the same bit statistics, which a power-bound matrix product can feel. Drawn once
// per (dtype, count, seed) and kept for the process, so each repetition of a row follows the last
// without a pause on the host, as the peer's repeats do (an idle GPU cools, and a power-bound
// product then runs faster).
const Buffer& random_buffer(DType dtype, std::int64_t count, std::uint64_t seed) {
  static std::map<std::tuple<DType, std::int64_t, std::uint64_t>, Buffer> drawn;
  if (const auto found = drawn.find({dtype, count, seed}); found != drawn.end()) {
    return found->second;
  }
  Buffer buffer(static_cast<std::size_t>(count) * dtype_size(dtype));
  std::vector<unsigned char> host(static_cast<std::size_t>(count) * dtype_size(dtype));
  std::uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
  for (std::int64_t i = 0; i < count; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const float x = static_cast<float>(state >> 40) * (2.0f / 16777216.0f) - 1.0f;
    unsigned char* at = host.data() + i * dtype_size(dtype);
    switch (dtype) {
      case DType::F32:
        std::memcpy(at, &x, 4);
        break;
      case DType::F16: {
        const kiln::half h(x);
        std::memcpy(at, &h.bits, 2);
        break;
      }
      case DType::BF16: {
        const kiln::bfloat16 h(x);
        std::memcpy(at, &h.bits, 2);
        break;
      }
      default: {
        const double d = x;
        std::memcpy(at, &d, 8);
        break;
      }
    }
  }
  KILN_CUDA_CHECK("bench",
                  cudaMemcpy(buffer.data, host.data(), host.size(), cudaMemcpyHostToDevice));
  return drawn.emplace(std::tuple{dtype, count, seed}, std::move(buffer)).first->second;
}

// Times `work` per iteration with CUDA events on `stream`, after warm-up launches.
template <class Work>
void time_with_events(benchmark::State& state, cudaStream_t stream, int warmup, Work&& work) {
  for (int i = 0; i < warmup; ++i) work();
  KILN_CUDA_CHECK("bench", cudaStreamSynchronize(stream));
  cudaEvent_t start, stop;
  KILN_CUDA_CHECK("bench", cudaEventCreate(&start));
  KILN_CUDA_CHECK("bench", cudaEventCreate(&stop));
  for (auto _ : state) {
    KILN_CUDA_CHECK("bench", cudaEventRecord(start, stream));
    work();
    KILN_CUDA_CHECK("bench", cudaEventRecord(stop, stream));
    KILN_CUDA_CHECK("bench", cudaEventSynchronize(stop));
    float ms = 0;
    KILN_CUDA_CHECK("bench", cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(static_cast<double>(ms) * 1e-3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

cudaStream_t bench_stream() {
  static cudaStream_t stream = [] {
    cudaStream_t s = nullptr;
    KILN_CUDA_CHECK("bench", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }();
  return stream;
}

void BM_memcpy_d2d(benchmark::State& state) {
  if (!have_device()) return state.SkipWithError("no CUDA device");
  const std::size_t bytes = std::size_t{1} << 30;
  Buffer from(bytes), to(bytes);
  KILN_CUDA_CHECK("bench", cudaMemset(from.data, 1, bytes));
  cudaStream_t stream = bench_stream();
  time_with_events(state, stream, 3, [&] {
    KILN_CUDA_CHECK("bench",
                    cudaMemcpyAsync(to.data, from.data, bytes, cudaMemcpyDeviceToDevice, stream));
  });
  state.counters["bytes"] = static_cast<double>(2 * bytes);
}

// matmul/<kind>/<n>: kind 0 bf16, 1 f16, 2 f32, 3 tf32; row-major n×n operands.
void BM_matmul(benchmark::State& state) {
  if (!have_device()) return state.SkipWithError("no CUDA device");
  const int kind = static_cast<int>(state.range(0));
  const std::int64_t n = state.range(1);
  const DType dtype = kind == 0 ? DType::BF16 : kind == 1 ? DType::F16 : DType::F32;
  MatmulDesc desc{dtype,     n,         n,
                  n,         1,         {n, 1, 0},
                  {n, 1, 0}, {n, 1, 0}, kind == 3 ? MatmulCompute::Tf32 : MatmulCompute::Default};
  const Buffer& a = random_buffer(dtype, n * n, 1);
  const Buffer& b = random_buffer(dtype, n * n, 2);
  Buffer c(static_cast<std::size_t>(n * n) * dtype_size(dtype));
  cudaStream_t stream = bench_stream();
  time_with_events(state, stream, 5, [&] {
    matmul(desc, {a.data, b.data, c.data, nullptr}, stream);
  });
  state.counters["flops"] = 2.0 * static_cast<double>(n) * n * n;
}

// sort/<n>: f32 values with i64 indices (what torch.sort returns); sort_keys/<n>: values only.
void run_sort(benchmark::State& state, bool with_indices) {
  if (!have_device()) return state.SkipWithError("no CUDA device");
  const std::int64_t n = state.range(0);
  SortDesc desc{DType::F32, 1, n, false, -1, with_indices, DType::I64};
  const Buffer& in = random_buffer(DType::F32, n, 3);
  Buffer values(static_cast<std::size_t>(n) * 4);
  Buffer indices(with_indices ? static_cast<std::size_t>(n) * 8 : 0);
  const std::size_t bytes = sort_workspace_bytes(desc);
  Buffer workspace(bytes);
  cudaStream_t stream = bench_stream();
  time_with_events(state, stream, 3, [&] {
    sort_rows(desc, in.data, values.data, indices.data, workspace.data, bytes, stream);
  });
  state.counters["bytes"] = static_cast<double>(n) * (4 + 4 + (with_indices ? 8 : 0));
}
void BM_sort(benchmark::State& state) { run_sort(state, true); }
// Values only with zeros and NaNs restored from positions carried through the sort (the
// alternative to the default compacted lists).
void BM_sort_keys_positions(benchmark::State& state) {
  const bool previous = sort_detail::float_values_by_positions();
  sort_detail::set_float_values_by_positions(true);
  run_sort(state, false);
  sort_detail::set_float_values_by_positions(previous);
}

// sort_rows/<rows>/<n>: every row of a [rows, n] f32 matrix with i64 indices (torch.sort dim -1).
// topk/<rows>/<n>/<k>: the k largest of each row with i64 indices (torch.topk), through a sort.
void run_rows(benchmark::State& state, std::int64_t keep) {
  if (!have_device()) return state.SkipWithError("no CUDA device");
  const std::int64_t rows = state.range(0);
  const std::int64_t n = state.range(1);
  SortDesc desc{DType::F32, rows, n, keep >= 0, keep, true, DType::I64};
  const std::int64_t out = rows * (keep < 0 ? n : keep);
  const Buffer& in = random_buffer(DType::F32, rows * n, 5);
  Buffer values(static_cast<std::size_t>(out) * 4);
  Buffer indices(static_cast<std::size_t>(out) * 8);
  const std::size_t bytes = sort_workspace_bytes(desc);
  Buffer workspace(bytes);
  cudaStream_t stream = bench_stream();
  time_with_events(state, stream, 3, [&] {
    sort_rows(desc, in.data, values.data, indices.data, workspace.data, bytes, stream);
  });
  state.counters["bytes"] = static_cast<double>(rows * n * 4 + out * 12);
}
void BM_sort_rows(benchmark::State& state) { run_rows(state, -1); }
void BM_topk_by_sort(benchmark::State& state) { run_rows(state, state.range(2)); }

void BM_sort_keys(benchmark::State& state) { run_sort(state, false); }

// launch_floor: the host cost of launching an empty kernel through the driver (cuLaunchKernel,
// one block of 256 threads, an 88-byte parameter block like the flat elementwise kernel's), in
// bursts of 200 timed by wall clock as gpu_ops_bench's small_add_host. The part of a small op's
// host cost that no framework on this driver can remove.
// A driver entry point through cudart (this program does not link libcuda, so it starts and
// skips on machines without a driver).
template <class Function>
Function driver(const char* symbol);

// Driver results by number: cuGetErrorString would need libcuda at link time.
void check_driver(CUresult status, const char* call) {
  if (status != CUDA_SUCCESS) {
    throw std::runtime_error(std::string(call) + " failed with CUresult " + std::to_string(status));
  }
}

template <class Function>
Function driver(const char* symbol) {
  void* pointer = nullptr;
  cudaDriverEntryPointQueryResult found{};
  KILN_CUDA_CHECK("bench", cudaGetDriverEntryPointByVersion(symbol, &pointer, 12000,
                                                            cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || pointer == nullptr) {
    throw std::runtime_error(std::string("no driver entry point ") + symbol);
  }
  return reinterpret_cast<Function>(pointer);
}

CUfunction empty_kernel() {
  static CUfunction function = [] {
    const char* source =
        "struct P { unsigned long long w[11]; };\n"
        "extern \"C\" __global__ void kiln_bench_empty(const P p) {\n"
        "  if (p.w[0] == 1 && threadIdx.x == 1234) ((unsigned long long*)p.w[1])[0] = 0; }\n";
    nvrtcProgram program = nullptr;
    KILN_CUDA_CHECK("bench", nvrtcCreateProgram(&program, source, "empty.cu", 0, nullptr, nullptr));
    int major = 0, minor = 0;
    KILN_CUDA_CHECK("bench", cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    KILN_CUDA_CHECK("bench", cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    const std::string arch = "--gpu-architecture=sm_" + std::to_string(major * 10 + minor);
    const char* options[] = {arch.c_str()};
    KILN_CUDA_CHECK("bench", nvrtcCompileProgram(program, 1, options));
    std::size_t size = 0;
    KILN_CUDA_CHECK("bench", nvrtcGetCUBINSize(program, &size));
    std::string cubin(size, '\0');
    KILN_CUDA_CHECK("bench", nvrtcGetCUBIN(program, cubin.data()));
    nvrtcDestroyProgram(&program);
    KILN_CUDA_CHECK("bench", cudaFree(nullptr));  // the primary context, current
    CUmodule module = nullptr;
    check_driver(driver<decltype(&cuModuleLoadData)>("cuModuleLoadData")(&module, cubin.data()),
                 "cuModuleLoadData");
    CUfunction f = nullptr;
    check_driver(driver<decltype(&cuModuleGetFunction)>("cuModuleGetFunction")(&f, module,
                                                                               "kiln_bench_empty"),
                 "cuModuleGetFunction");
    return f;
  }();
  return function;
}

void BM_launch_floor(benchmark::State& state) {
  if (!have_device()) return state.SkipWithError("no CUDA device");
  constexpr int kBurst = 200;
  CUfunction function = empty_kernel();
  const auto launch = driver<decltype(&cuLaunchKernel)>("cuLaunchKernel");
  cudaStream_t stream = bench_stream();
  unsigned long long params[11] = {};
  void* args[] = {params};
  for (auto _ : state) {
    KILN_CUDA_CHECK("bench", cudaStreamSynchronize(stream));
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kBurst; ++i) {
      check_driver(launch(function, 1, 1, 1, 256, 1, 1, 0, stream, args, nullptr),
                   "cuLaunchKernel");
    }
    const auto queued = std::chrono::steady_clock::now();
    KILN_CUDA_CHECK("bench", cudaStreamSynchronize(stream));
    state.SetIterationTime(std::chrono::duration<double>(queued - start).count() / kBurst);
  }
}

BENCHMARK(BM_launch_floor)
    ->Name("launch_floor")
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(50);
BENCHMARK(BM_memcpy_d2d)
    ->Name("memcpy_d2d")
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(20);
BENCHMARK(BM_matmul)
    ->Name("matmul")
    ->ArgsProduct({{0, 1, 2, 3}, {4096, 8192}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(20);
BENCHMARK(BM_sort)
    ->Name("sort")
    ->Arg(1 << 24)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(20);
BENCHMARK(BM_sort_keys)
    ->Name("sort_keys")
    ->Arg(1 << 24)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(20);
BENCHMARK(BM_sort_keys_positions)
    ->Name("sort_keys_positions")
    ->Arg(1 << 24)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(20);
BENCHMARK(BM_sort_rows)
    ->Name("sort_rows")
    ->Args({4096, 4096})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(20);
BENCHMARK(BM_topk_by_sort)
    ->Name("topk_by_sort")
    ->Args({4096, 32768, 8})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(10);
}  // namespace

BENCHMARK_MAIN();
