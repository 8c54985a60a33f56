// Quantized matrix-vector products (src/backends/cpu/quant_matvec.h) against their floor: the
// weight's bytes read once at the machine's copy bandwidth, measured here by a parallel memcpy
// on the same threads. Each row reports bytes per second (weight bytes for the products, bytes
// read plus written for memcpy, bytes read for read_floor); the target is a product at
// 80 % of memcpy's rate, and read_floor is the rate no product that reads its weight can pass.
// quant_batch rows: batches of 1, 8 and 32 rows through the Tensor API, beside the f32 product.
//   build/bench/quant_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <kiln/kiln.h>
#include <omp.h>

#include <cstring>
#include <optional>
#include <stdexcept>
#include <vector>

#include "backends/cpu/quant_matvec.h"
#include "bench_common.h"

namespace {

using namespace kiln;
using namespace kiln::bench;

// 8192 x 8192: 71 MB of Q8_0 and 38 MB of Q4_0, several times the last-level cache, so the
// products stream the weight from memory as a model's layers do.
constexpr std::int64_t kRows = 8192;
constexpr std::int64_t kCols = 8192;

void memcpy_floor(benchmark::State& state) {
  const std::size_t count = std::size_t{16} << 20;  // 64 MiB of f32
  time_parallel_memcpy(state, count);
  state.SetBytesProcessed(
      static_cast<std::int64_t>(state.iterations() * 2 * count * sizeof(float)));
}
BENCHMARK(memcpy_floor)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);

// The read-only floor: a matrix-vector product reads its weight and writes almost nothing, so
// the rate at which the threads can only read memory bounds it more tightly than memcpy's
// (whose writes also cost a read of each target line). Each thread folds its share of 256 MiB
// into four AVX2 registers with xor (one cycle each, so the adds' latency hides nothing).
__attribute__((target("avx2"))) std::uint64_t fold(const std::byte* data, std::size_t bytes) {
  __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                    _mm256_setzero_si256()};
  for (std::size_t i = 0; i + 128 <= bytes; i += 128) {
    for (int k = 0; k < 4; ++k) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + i + 32 * k));
      acc[k] = _mm256_xor_si256(acc[k], v);
    }
  }
  const __m256i all =
      _mm256_xor_si256(_mm256_xor_si256(acc[0], acc[1]), _mm256_xor_si256(acc[2], acc[3]));
  return static_cast<std::uint64_t>(_mm256_extract_epi64(all, 0) ^ _mm256_extract_epi64(all, 3));
}

void read_floor(benchmark::State& state) {
  const std::size_t bytes = std::size_t{256} << 20;
  std::vector<std::byte> data(bytes);
  for (std::size_t i = 0; i < bytes; i += 4096) data[i] = std::byte(i >> 12);
  // Spot check: the fold of a page-strided pattern is the xor of its bytes.
  std::uint8_t want = 0;
  for (std::size_t i = 0; i < bytes; i += 4096) want ^= static_cast<std::uint8_t>(i >> 12);
  std::uint64_t got = 0;
  for (auto _ : state) {
    got = 0;
#pragma omp parallel reduction(^ : got)
    {
      const std::size_t threads = static_cast<std::size_t>(omp_get_num_threads());
      const std::size_t t = static_cast<std::size_t>(omp_get_thread_num());
      const std::size_t begin = bytes / 128 * t / threads * 128;
      const std::size_t end = bytes / 128 * (t + 1) / threads * 128;
      got ^= fold(data.data() + begin, end - begin);
    }
    benchmark::DoNotOptimize(got);
  }
  // Every byte lands in lane byte (i mod 32); the 4096-byte stride keeps them in lane 0, and
  // the fold takes lanes 0 and 3's low bytes.
  if ((got & 0xff) != want) state.SkipWithError("read_floor: wrong fold");
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}
BENCHMARK(read_floor)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);

void quant_matvec(benchmark::State& state, QuantScheme::Kind kind, cpu::QuantIsa isa) {
  guarded(state, [&] {
    const TensorData weight =
        TensorData::from_vec(host_values(kRows * kCols, 3), Shape{kRows, kCols})
            .quantize(quant_scheme(kind));
    const std::vector<float> x = host_values(kCols, 4);
    std::vector<float> y(kRows);
    // Spot check: one row against its dequantized dot product (the VNNI kernels round x to int8
    // blocks: about 1e-3 relative here).
    cpu::quantized_matvec(weight, x, y);
    const std::vector<float> row =
        TensorData::quantized(
            {weight.bytes().begin(), weight.bytes().begin() + weight.bytes().size() / kRows},
            Shape{1, kCols}, weight.scheme())
            .dequantize()
            .to_vec<float>();
    double want = 0;
    for (std::int64_t k = 0; k < kCols; ++k) want += double(row[k]) * x[k];
    expect_near(y[0], want, 1e-2, "quantized_matvec");
    if (!cpu::cpu_has(isa)) throw std::runtime_error("this CPU lacks the instruction set");
    for (auto _ : state) {
      cpu::quantized_matvec(weight, x, y, isa);
      benchmark::DoNotOptimize(y.data());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * weight.bytes().size()));
  });
}
// The best instruction set the CPU has (what kiln picks), and AVX2 beside it.
BENCHMARK_CAPTURE(quant_matvec, q8_0, QuantScheme::Kind::Q8_0, cpu::best_quant_isa())
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.5);
BENCHMARK_CAPTURE(quant_matvec, q4_0, QuantScheme::Kind::Q4_0, cpu::best_quant_isa())
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.5);
BENCHMARK_CAPTURE(quant_matvec, q8_0_avx2, QuantScheme::Kind::Q8_0, cpu::QuantIsa::Avx2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.5);
BENCHMARK_CAPTURE(quant_matvec, q4_0_avx2, QuantScheme::Kind::Q4_0, cpu::QuantIsa::Avx2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.5);

// Products with a batch of rows through the Tensor API, as a model calls them:
// x [batch, 4096] . W^T for W [4096, 4096], quantized (the kernels on the blocks) or f32 (oneDNN's
// sgemm over the decoded weight, what a float model does), the result read back. Each row
// reports the weight bytes read per second and the time per product: at small batches the
// quantized product reads a quarter (Q8_0) or an eighth (Q4_0) of the f32 weight's bytes.
constexpr std::int64_t kBatchRows = 4096;
constexpr std::int64_t kBatchCols = 4096;

void quant_batch(benchmark::State& state, std::optional<QuantScheme::Kind> kind) {
  guarded(state, [&] {
    const Device device = Device::cpu();
    const std::int64_t batch = state.range(0);
    const auto weight = Tensor<2>::from_data(
        TensorData::from_vec(host_values(kBatchRows * kBatchCols, 6), {kBatchRows, kBatchCols}),
        device);
    const Tensor<2> w = kind ? weight.quantize(quant_scheme(*kind)) : weight;
    const auto x = Tensor<2>::from_data(
        TensorData::from_vec(host_values(batch * kBatchCols, 7), {batch, kBatchCols}), device);
    // Spot check: the first product against its dequantized float64 dot product (the VNNI
    // kernels round x to int8 blocks: here about 0.02 off).
    const Tensor<2> first = w.slice({{0, 1}});  // a quantized weight's row stays quantized
    const std::vector<float> row = (kind ? first.dequantize() : first).into_data().to_vec<float>();
    const std::vector<float> xs = host_values(batch * kBatchCols, 7);
    double want = 0;
    for (std::int64_t k = 0; k < kBatchCols; ++k) want += double(row[k]) * xs[k];
    expect_near(read_one(x.matmul(w.transpose())), want, 0.1, "quant_batch");
    const std::size_t bytes =
        kind ? w.into_data().bytes().size() : static_cast<std::size_t>(kBatchRows * kBatchCols * 4);
    for (auto _ : state) benchmark::DoNotOptimize(x.matmul(w.transpose()).into_data());
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  });
}
// Batches of 1, 8 and 32 rows.
void batches(benchmark::internal::Benchmark* b) {
  b->Arg(1)->Arg(8)->Arg(32)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
}
BENCHMARK_CAPTURE(quant_batch, q8_0, QuantScheme::Kind::Q8_0)->Apply(batches);
BENCHMARK_CAPTURE(quant_batch, q4_0, QuantScheme::Kind::Q4_0)->Apply(batches);
BENCHMARK_CAPTURE(quant_batch, f32, std::nullopt)->Apply(batches);

}  // namespace

BENCHMARK_MAIN();
