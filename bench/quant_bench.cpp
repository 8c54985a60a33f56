// Quantized matrix-vector products (src/backends/cpu/quant_matvec.h) against their floor: the
// weight's bytes read once at the machine's copy bandwidth, measured here by a parallel memcpy
// on the same threads. Each row reports bytes per second (weight bytes for the products, bytes
// read plus written for memcpy, bytes read for read_floor); the target is a product at
// 80 % of memcpy's rate, and read_floor is the rate no product that reads its weight can pass.
// quant_matvec_vs_memcpy rows: the product, memcpy and the read stream timed in turns, so that
// their ratios (of_memcpy, of_read) hold on a machine whose bandwidth changes as they run.
// quant_batch rows: batches of 1, 8 and 32 rows through the Tensor API, beside the f32 product.
//   build/bench/quant_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <kiln/kiln.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <stdexcept>
#include <vector>

#include "backends/cpu/parallel.h"
#include "backends/cpu/quant_matvec.h"
#include "bench_common.h"
#include "median.h"

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

// A [rows, cols] weight of kind: normal values encoded, or, for a kind kiln only decodes (Q2_K,
// Q3_K, Q5_K), random blocks whose f16 scales are 2^-12, so the values are about as large as the
// encoded kinds' (a timing needs only their bytes).
TensorData quantized_weight(QuantScheme::Kind kind, std::int64_t rows, std::int64_t cols,
                            std::uint32_t seed) {
  using Kind = QuantScheme::Kind;
  const QuantScheme scheme = quant_scheme(kind);
  if (can_quantize(scheme)) {
    return TensorData::from_vec(host_values(rows * cols, seed), Shape{rows, cols}).quantize(scheme);
  }
  // Bytes of a 256-value block and where its f16 scales are.
  struct Layout {
    std::int64_t bytes;
    std::vector<std::int64_t> scales;
  };
  const Layout layout = kind == Kind::Q2_K   ? Layout{84, {80, 82}}
                        : kind == Kind::Q3_K ? Layout{110, {108}}
                        : kind == Kind::Q5_K
                            ? Layout{176, {0, 2}}
                            : throw std::invalid_argument("no weights of this kind");
  std::mt19937 rng(seed);
  std::vector<std::byte> bytes(static_cast<std::size_t>(rows * cols / 256 * layout.bytes));
  for (std::byte& b : bytes) b = static_cast<std::byte>(rng() & 0xff);
  for (std::size_t at = 0; at < bytes.size(); at += static_cast<std::size_t>(layout.bytes)) {
    const std::uint16_t scale = 0x0C00;  // f16 2^-12
    for (std::int64_t field : layout.scales) std::memcpy(bytes.data() + at + field, &scale, 2);
  }
  return TensorData::quantized(std::move(bytes), Shape{rows, cols}, scheme);
}

// An 8192 x 8192 weight of kind, x and y, the product spot-checked: one row against its
// dequantized dot product (the VNNI kernels round x to int8 blocks: about 1e-3 relative here).
struct MatvecCase {
  TensorData weight;
  std::vector<float> x, y;
};

MatvecCase matvec_case(QuantScheme::Kind kind) {
  MatvecCase c{quantized_weight(kind, kRows, kCols, 3), host_values(kCols, 4),
               std::vector<float>(kRows)};
  cpu::quantized_matvec(c.weight, c.x, c.y);
  const std::vector<float> row =
      TensorData::quantized(
          {c.weight.bytes().begin(), c.weight.bytes().begin() + c.weight.bytes().size() / kRows},
          Shape{1, kCols}, c.weight.scheme())
          .dequantize()
          .to_vec<float>();
  double want = 0;
  for (std::int64_t k = 0; k < kCols; ++k) want += double(row[k]) * c.x[k];
  expect_near(c.y[0], want, 1e-2, "quantized_matvec");
  return c;
}

void quant_matvec(benchmark::State& state, QuantScheme::Kind kind, cpu::QuantIsa isa) {
  guarded(state, [&] {
    MatvecCase c = matvec_case(kind);
    if (!cpu::cpu_has(isa)) throw std::runtime_error("this CPU lacks the instruction set");
    for (auto _ : state) {
      cpu::quantized_matvec(c.weight, c.x, c.y, isa);
      benchmark::DoNotOptimize(c.y.data());
    }
    state.SetBytesProcessed(
        static_cast<std::int64_t>(state.iterations() * c.weight.bytes().size()));
  });
}

// The figure, measured so that noise cannot make it: the product and a copy of 64 MiB
// (memcpy_floor's) timed in turns, so that both see the same moment of this machine, whose
// bandwidth another tenant can halve for seconds at a time (separate rows, seconds apart, take
// that for the kernel's speed). Each turn runs each twice and times the second: the first
// product pays for writing back the copy's dirty lines, which no decoder step would. The copy
// runs on kiln's threads, as the product does (OpenMP's idle threads would spin through the
// product). The row's time is the product's; its counters are the median rates (bytes read by
// the product, read plus written by the copy) and the ratio of the medians, `of_memcpy`.
void quant_matvec_vs_memcpy(benchmark::State& state, QuantScheme::Kind kind) {
  guarded(state, [&] {
    MatvecCase c = matvec_case(kind);
    const std::int64_t count = std::int64_t{16} << 20;  // 64 MiB of f32, as memcpy_floor
    const std::vector<float> source = host_values(count, 5);
    std::vector<float> target(static_cast<std::size_t>(count));
    const auto copy = [&] {
      cpu::parallel_for(count, count / 8, [&](std::int64_t begin, std::int64_t end) {
        std::memcpy(target.data() + begin, source.data() + begin,
                    static_cast<std::size_t>(end - begin) * sizeof(float));
      });
      benchmark::ClobberMemory();
    };
    const auto product = [&] {
      cpu::quantized_matvec(c.weight, c.x, c.y);
      benchmark::DoNotOptimize(c.y.data());
    };
    using Clock = std::chrono::steady_clock;
    const auto seconds = [](auto&& run) {
      const auto start = Clock::now();
      run();
      return std::chrono::duration<double>(Clock::now() - start).count();
    };
    // read_floor's fold over the copy's source (64 MiB), on kiln's threads.
    const auto* words = reinterpret_cast<const std::byte*>(source.data());
    const std::size_t read_bytes = static_cast<std::size_t>(count) * sizeof(float);
    std::uint64_t folded = 0;
    const auto read = [&] {
      std::atomic<std::uint64_t> all{0};
      cpu::parallel_for(static_cast<std::int64_t>(read_bytes / 128), 1 << 16,
                        [&](std::int64_t begin, std::int64_t end) {
                          all ^= fold(words + begin * 128,
                                      static_cast<std::size_t>(end - begin) * 128);
                        });
      folded = all;
      benchmark::DoNotOptimize(folded);
    };
    std::vector<double> product_rates, copy_rates, read_rates;
    for (auto _ : state) {
      copy();
      const double copy_s = seconds(copy);
      read();
      const double read_s = seconds(read);
      product();
      const double product_s = seconds(product);
      if (source[7] != target[7]) state.SkipWithError("the copy did not copy");
      copy_rates.push_back(2.0 * static_cast<double>(count) * sizeof(float) / copy_s);
      read_rates.push_back(static_cast<double>(read_bytes) / read_s);
      product_rates.push_back(static_cast<double>(c.weight.bytes().size()) / product_s);
      state.SetIterationTime(product_s);
    }
    const double product_rate = median(product_rates), copy_rate = median(copy_rates);
    const double read_rate = median(read_rates);
    state.counters["product_GBps"] = product_rate / 1e9;
    state.counters["memcpy_GBps"] = copy_rate / 1e9;
    state.counters["read_GBps"] = read_rate / 1e9;
    state.counters["of_memcpy"] = copy_rate > 0 ? product_rate / copy_rate : 0.0;
    state.counters["of_read"] = read_rate > 0 ? product_rate / read_rate : 0.0;
  });
}
BENCHMARK_CAPTURE(quant_matvec_vs_memcpy, q8_0, QuantScheme::Kind::Q8_0)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(quant_matvec_vs_memcpy, q4_0, QuantScheme::Kind::Q4_0)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(quant_matvec_vs_memcpy, q4_k, QuantScheme::Kind::Q4_K)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(quant_matvec_vs_memcpy, q5_0, QuantScheme::Kind::Q5_0)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(quant_matvec_vs_memcpy, q3_k, QuantScheme::Kind::Q3_K)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(quant_matvec_vs_memcpy, q5_k, QuantScheme::Kind::Q5_K)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(quant_matvec_vs_memcpy, q6_k, QuantScheme::Kind::Q6_K)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);

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
    const Tensor<2> w =
        Tensor<2>::from_data(kind ? quantized_weight(*kind, kBatchRows, kBatchCols, 6)
                                  : TensorData::from_vec(host_values(kBatchRows * kBatchCols, 6),
                                                         {kBatchRows, kBatchCols}),
                             device);
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
BENCHMARK_CAPTURE(quant_batch, q4_1, QuantScheme::Kind::Q4_1)->Apply(batches);
BENCHMARK_CAPTURE(quant_batch, q5_0, QuantScheme::Kind::Q5_0)->Apply(batches);
BENCHMARK_CAPTURE(quant_batch, q5_1, QuantScheme::Kind::Q5_1)->Apply(batches);
BENCHMARK_CAPTURE(quant_batch, q2_k, QuantScheme::Kind::Q2_K)->Apply(batches);
BENCHMARK_CAPTURE(quant_batch, q3_k, QuantScheme::Kind::Q3_K)->Apply(batches);
BENCHMARK_CAPTURE(quant_batch, q4_k, QuantScheme::Kind::Q4_K)->Apply(batches);
BENCHMARK_CAPTURE(quant_batch, q5_k, QuantScheme::Kind::Q5_K)->Apply(batches);
BENCHMARK_CAPTURE(quant_batch, q6_k, QuantScheme::Kind::Q6_K)->Apply(batches);
BENCHMARK_CAPTURE(quant_batch, f32, std::nullopt)->Apply(batches);

}  // namespace

BENCHMARK_MAIN();
