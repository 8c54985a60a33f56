// Issue 20's GPU targets for quantized products, through kiln's tensor API on cuda:0, with the
// device's copy bandwidth measured in the same run (scripts/gpu-check gpu-quant prints the table):
//   memcpy                     cudaMemcpyAsync of 1 GiB device to device: (read + write) / time
//   matvec/<kind>/<n>x<k>      y[1, n] = x[1, k] · Wᵀ for W [n, k] in kind (Q4_0, Q4_K, Q8_0), x
//                              bf16: the weight's bytes / time, and that as a share of memcpy's
//                              bandwidth (issue 20: >= 85 % at 4096x4096 and 14336x4096)
//   batch/<kind>/<rows>/<n>x<k>   x[rows, k] · Wᵀ against the same product with W in bf16
//                              (cuBLASLt): the quantized time over bf16's (issue 20: <= 1 at 8, 32)
//   int8_gemm/8192             kiln_cuda_lib's int8 x int8 -> int32 product (lib/int8_matmul.h)
//                              at 8192^3 against lib::matmul in bf16 at 8192^3, CUDA events
//                              around 5 products: tera-operations per second and the ratio
//                              (issue 20: >= 1.6)
// Each product is checked against the CPU's quantized product first. Times are per product:
// kKernelsPerGraph products captured in one CUDA graph (kiln::capture), replayed, the wall time
// over a device sync divided (the launch cost of the host is not in it); the eager time (one
// call after another, then a sync) is printed beside it. Medians of --repeats replays. The
// products take their weight in turns from copies that together hold at least 2.5 times the
// L2 cache (up to kKernelsPerGraph copies), so every product reads its weight from device memory
// as a model's layers do, not from L2 where the last product left it; bf16's rows the same.
//   gpu_quant_bench [--repeats N] [--quick] [--only KIND] [--rows 1,8,32]   (KIND any GGUF kind
//   kiln encodes: q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q6_k; --only leaves out the int8 product too;
//   --rows the rows of x, up to 4 a matvec row)
#include <cuda_runtime_api.h>
#include <kiln/graph.h>
#include <kiln/kiln.h>
#include <kiln/module_ops.h>
#include <kiln/quant.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/lib/int8_matmul.h"
#include "backends/cuda/lib/matmul.h"
#include "median.h"

namespace {

using namespace kiln;
using bench::median;
using Clock = std::chrono::steady_clock;
using QKind = QuantScheme::Kind;

constexpr int kKernelsPerGraph = 20;

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "gpu_quant_bench: %s failed: %s\n", call, cudaGetErrorString(status));
    std::exit(1);
  }
}

// Device-to-device copy bandwidth in bytes per second (read + write), median of repeats.
double memcpy_bandwidth(int repeats) {
  const std::size_t bytes = std::size_t{1} << 30;
  void *from = nullptr, *to = nullptr;
  check(cudaMalloc(&from, bytes), "cudaMalloc");
  check(cudaMalloc(&to, bytes), "cudaMalloc");
  check(cudaMemset(from, 1, bytes), "cudaMemset");
  cudaEvent_t start = nullptr, stop = nullptr;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> rates;
  for (int r = 0; r < repeats + 1; ++r) {
    check(cudaEventRecord(start), "cudaEventRecord");
    for (int i = 0; i < 3; ++i)
      check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync");
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (r > 0) rates.push_back(3.0 * 2.0 * static_cast<double>(bytes) / (ms * 1e-3));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(from);
  cudaFree(to);
  return median(rates);
}

std::vector<float> normal_values(std::int64_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// Seconds per call of run on the default stream: CUDA events around 5 calls, after one that warms
// up (plans, autotuning), median of repeats.
template <class Run>
double time_events(int repeats, Run run) {
  cudaEvent_t start = nullptr, stop = nullptr;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  run();
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) {
    check(cudaEventRecord(start), "cudaEventRecord");
    for (int i = 0; i < 5; ++i) run();
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    samples.push_back(ms * 1e-3 / 5);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(samples);
}

// int8 x int8 -> int32 at n^3 against bf16 (f32 accumulation) at n^3: seconds of each.
std::pair<double, double> int8_against_bf16(std::int64_t n, int repeats) {
  void *a = nullptr, *b = nullptr, *c = nullptr;
  const auto elements = static_cast<std::size_t>(n * n);
  check(cudaMalloc(&a, elements * 2), "cudaMalloc");
  check(cudaMalloc(&b, elements * 2), "cudaMalloc");
  check(cudaMalloc(&c, elements * 4), "cudaMalloc");
  // Small codes (and bf16 values 2^-k-ish): any bits serve a timing; 0x01 bytes are both.
  check(cudaMemset(a, 1, elements * 2), "cudaMemset");
  check(cudaMemset(b, 1, elements * 2), "cudaMemset");
  const cuda::lib::Int8MatmulDesc int8{n, n, n, n, n, n};
  const double int8_seconds =
      time_events(repeats, [&] { cuda::lib::int8_matmul(int8, a, b, c, nullptr); });
  // The int32 sums of n products of 1 * 1.
  std::int32_t first = 0;
  check(cudaMemcpy(&first, c, 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (first != n) {
    std::fprintf(stderr, "gpu_quant_bench: int8_gemm gave %d, want %lld\n", first,
                 static_cast<long long>(n));
    std::exit(1);
  }
  cuda::lib::MatmulDesc bf16;
  bf16.dtype = DType::BF16;
  bf16.m = bf16.n = bf16.k = n;
  bf16.a = {n, 1, 0};
  bf16.b = {n, 1, 0};
  bf16.c = {n, 1, 0};
  const double bf16_seconds = time_events(repeats, [&] {
    cuda::lib::matmul(bf16, {a, b, c, nullptr}, nullptr);
  });
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return {int8_seconds, bf16_seconds};
}

// Copies of a weight of `bytes` bytes that together hold 2.5 times the L2 cache.
int weight_copies(std::size_t bytes) {
  int l2 = 0;
  check(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0), "cudaDeviceGetAttribute");
  const double wanted = std::ceil(2.5 * l2 / static_cast<double>(bytes));
  return static_cast<int>(std::clamp(wanted, 1.0, static_cast<double>(kKernelsPerGraph)));
}

struct Timing {
  double graph = 0;  // seconds per product, replayed in a CUDA graph
  double eager = 0;  // seconds per product, called one after another
};

// Seconds per call of product(i) on device: captured kKernelsPerGraph at a time (i = 0, 1, ...)
// and replayed, and eagerly.
template <class Product>
Timing time_product(const Device& device, int repeats, Product product) {
  Tensor<2> held;
  Graph graph = capture(device, [&] {
    for (int i = 0; i < kKernelsPerGraph; ++i) held = product(i);
  });
  Timing timing;
  std::vector<double> samples;
  for (int r = 0; r < repeats + 1; ++r) {
    const auto start = Clock::now();
    graph.replay();
    device.sync();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (r > 0) samples.push_back(seconds / kKernelsPerGraph);
  }
  timing.graph = median(samples);
  samples.clear();
  std::vector<Tensor<2>> results(kKernelsPerGraph);
  for (int r = 0; r < repeats + 1; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < kKernelsPerGraph; ++i) results[static_cast<std::size_t>(i)] = product(i);
    device.sync();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (r > 0) samples.push_back(seconds / kKernelsPerGraph);
  }
  timing.eager = median(samples);
  return timing;
}

// The product's result against the CPU's quantized product of the same operands.
void verify(const Tensor<2>& got, const TensorData& x, const TensorData& w, const char* what) {
  const auto want = Tensor<2>::from_data(x, Device::cpu())
                        .matmul(Tensor<2>::from_data(w, Device::cpu()).transpose())
                        .into_data()
                        .to_f64_vec();
  const auto g = got.into_data().to_f64_vec();
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    worst = std::max(worst, std::fabs(g[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  if (!(worst <= 3e-2 * scale)) {
    std::fprintf(stderr, "gpu_quant_bench: %s differs from the CPU's product by %g (scale %g)\n",
                 what, worst, scale);
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 7;
  bool quick = false;
  std::string only;
  std::vector<std::int64_t> batches = {1, 8, 32};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) repeats = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
    if (std::strcmp(argv[i], "--rows") == 0 && i + 1 < argc) {
      batches.clear();
      for (const char* at = argv[++i]; *at != '\0';) {
        char* end = nullptr;
        batches.push_back(std::strtoll(at, &end, 10));
        at = *end == ',' ? end + 1 : end;
        if (end == at && *end != '\0') break;
      }
    }
  }
  try {
    const Device device = Device::cuda(0);
    const double copy = memcpy_bandwidth(repeats);
    std::printf("%-34s %10s %10s %10s %12s\n", "row", "graph us", "eager us", "GB/s", "vs target");
    std::printf("%-34s %10s %10s %10.1f %12s\n", "memcpy (read + write)", "-", "-", copy / 1e9,
                "-");
    int l2 = 0;
    check(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0), "cudaDeviceGetAttribute");
    std::printf("L2 cache %.1f MiB: each row's weight copies hold at least 2.5 times it\n",
                l2 / 1048576.0);
    std::vector<QKind> kinds = {QKind::Q4_0, QKind::Q4_K, QKind::Q8_0};
    if (!only.empty()) {  // any GGUF kind kiln encodes, by name; the three above by default
      kinds = {QKind::Q4_0, QKind::Q4_1, QKind::Q5_0, QKind::Q5_1,
               QKind::Q8_0, QKind::Q4_K, QKind::Q6_K};
      std::erase_if(kinds, [&](QKind kind) {
        std::string name(quant_kind_name(kind));
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return name != only;
      });
    }
    // [n, k]: a square projection and an MLP's up (14336 x 4096) and down (4096 x 14336).
    std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
        {4096, 4096}, {14336, 4096}, {4096, 14336}};
    if (quick) shapes.resize(1);
    for (QKind kind : kinds) {
      for (const auto& [n, k] : shapes) {
        const TensorData w =
            TensorData::from_vec(normal_values(n * k, 7), Shape{n, k}).quantize(quant_scheme(kind));
        const int copies = weight_copies(w.bytes().size());
        std::vector<Tensor<2>> qt;  // the weight's copies, transposed
        for (int c = 0; c < copies; ++c) qt.push_back(Tensor<2>::from_data(w, device).transpose());
        const std::string shape = std::to_string(n) + "x" + std::to_string(k);
        for (std::int64_t rows : batches) {
          const TensorData xd =
              TensorData::from_vec(normal_values(rows * k, 8), Shape{rows, k}).convert(DType::BF16);
          const auto x = Tensor<2>::from_data(xd, device);
          const std::string row = (rows <= 4 ? "matvec" : "batch") +
                                  (rows == 1 ? std::string() : std::to_string(rows)) + "/" +
                                  std::string(quant_kind_name(kind)) + "/" + shape;
          verify(x.matmul(qt[0]), xd, w, row.c_str());
          const Timing quantized =
              time_product(device, repeats, [&](int i) { return x.matmul(qt[i % copies]); });
          if (rows <= 4) {  // kiln_quant_matvec's rows: the weight's bytes over the time
            const double rate = static_cast<double>(w.bytes().size()) / quantized.graph;
            std::printf("%-34s %10.2f %10.2f %10.1f %11.0f%%\n", row.c_str(), quantized.graph * 1e6,
                        quantized.eager * 1e6, rate / 1e9, 100.0 * rate / copy);
            continue;
          }
          // The same product with the weight decoded to bf16, through cuBLASLt.
          const int dense_copies = weight_copies(static_cast<std::size_t>(n * k * 2));
          std::vector<Tensor<2>> dt;
          for (int c = 0; c < dense_copies; ++c)
            dt.push_back(qt[0].transpose().dequantize(DType::BF16).transpose());
          const Timing bf16 =
              time_product(device, repeats, [&](int i) { return x.matmul(dt[i % dense_copies]); });
          std::printf("%-34s %10.2f %10.2f %10s %10.2fx\n", row.c_str(), quantized.graph * 1e6,
                      quantized.eager * 1e6, "-", quantized.graph / bf16.graph);
          std::printf("%-34s %10.2f %10.2f %10s %12s\n", ("  bf16 cuBLASLt " + shape).c_str(),
                      bf16.graph * 1e6, bf16.eager * 1e6, "-", "-");
        }
      }
    }
    const std::int64_t gemm = quick ? 4096 : 8192;
    if (!only.empty()) return 0;
    const auto [int8_seconds, bf16_seconds] = int8_against_bf16(gemm, repeats);
    const double ops = 2.0 * static_cast<double>(gemm) * gemm * gemm;
    std::printf("%-34s %10.1f %10s %10s %10.2fx\n",
                ("int8_gemm/" + std::to_string(gemm) + " (TOPS)").c_str(),
                ops / int8_seconds / 1e12, "-", "-", bf16_seconds / int8_seconds);
    std::printf("%-34s %10.1f %10s %10s %12s\n",
                ("  bf16 cuBLASLt/" + std::to_string(gemm) + " (TFLOPS)").c_str(),
                ops / bf16_seconds / 1e12, "-", "-", "-");
    std::printf(
        "targets: matvec >= 85%% of memcpy; batch 8 and 32 at most 1.00x bf16's time; "
        "int8_gemm at least 1.60x bf16's throughput\n");
  } catch (const Error& e) {
    std::fprintf(stderr, "gpu_quant_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
