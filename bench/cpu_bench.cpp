// CPU benchmarks of the canonical workloads (DESIGN.md §8) with their in-binary baselines:
// cblas_sgemm for matmul (its best GFLOP/s is the measured peak), a parallel memcpy and a STREAM
// triad, with ordinary and with streaming stores, for the memory-bound ops (their best GB/s is the
// measured bandwidth). bench/run_all.sh
// runs this with repetitions, runs the PyTorch peer (bench/peer_torch.py) and prints the table
// (bench/report.py).
//
// Each benchmark reads its result back inside the timed loop: a one-element slice goes through
// into_data, which forces a lazy backend to finish the op without timing a copy of the whole
// output. small_add times dispatch only ("read-free", as §8 defines it) and checks its result
// after the loop. Every benchmark exports counters the report turns into rates and floors:
// `flops` or `bytes` per iteration.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <kiln/kiln.h>
#include <omp.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "runtime/registry.h"

namespace {

using namespace kiln;
using namespace kiln::bench;

const Device kDevice = Device::cpu();
// The fusion decorator over the same CPU: the *_fused rows run the same workloads recorded and
// run as one group (the read forces it).
const Device kFused = Device::cpu().fused();
constexpr std::int64_t kLarge = 4096;  // side of the elementwise and softmax workloads

// The public API, as a user calls it.
Tensor<2> matmul_op(const Tensor<2>& a, const Tensor<2>& b) { return a.matmul(b); }
Tensor<4> conv2d_op(const Tensor<4>& x, const Tensor<4>& weight, const ConvOptions& options) {
  return module::conv2d(x, weight, std::nullopt, options);
}
Tensor<2> softmax_op(const Tensor<2>& x, std::int64_t dim) { return activation::softmax(x, dim); }

Tensor<2> random_matrix(std::int64_t rows, std::int64_t cols, Device device = kDevice) {
  return Tensor<2>::random({rows, cols}, Distribution::uniform(-1, 1), device);
}

// ---- small_add: per-op overhead on 16 elements ----
void run_small_add(benchmark::State& state, Device device) {
  guarded(state, [&] {
    const std::vector<float> a = host_values(16, 1), b = host_values(16, 2);
    auto x = Tensor<1>::from_data(TensorData::from_vec(a, {16}), device);
    auto y = Tensor<1>::from_data(TensorData::from_vec(b, {16}), device);
    const std::vector<float> got = (x + y).into_data().to_vec<float>();
    for (std::size_t i = 0; i < got.size(); ++i) expect_near(got[i], a[i] + b[i], 0, "small_add");
    for (auto _ : state) {
      auto z = x + y;
      benchmark::DoNotOptimize(z.primitive().get());
    }
  });
}
void small_add(benchmark::State& state) { run_small_add(state, kDevice); }
BENCHMARK(small_add)->MinTime(0.2);
// On the fused device: 16 elements are under the CPU's min_fused_elements, so the add runs at
// once through the decorator (op_chain below times recorded ops).
void small_add_fused(benchmark::State& state) { run_small_add(state, kFused); }
BENCHMARK(small_add_fused)->MinTime(0.2);

// ---- op_chain: the host cost per op of a chain of 64 small elementwise ops ----
// x = x * y + 0.25, 32 times (64 ops; |x| stays below 1), on Arg(0) elements. Every row reports
// per_op = time / 64. With 4096 elements (the CPU's min_fused_elements) the fused device
// records each op and the read runs the chain as one group; the *_record row only records and
// drops the chain, the cost of recording alone; the plain row is the same chain run eagerly.
// With 16 elements the fused device runs each op at once (a group so small would run op by op
// anyway): its cost over the plain row is the decorator's eager path.
constexpr int kChainOps = 64;
Tensor<1> op_chain(Tensor<1> x, const Tensor<1>& y) {
  for (int i = 0; i < kChainOps / 2; ++i) x = (x * y).add_scalar(0.25);
  return x;
}
void run_op_chain(benchmark::State& state, Device device, bool read) {
  // Seconds per op (an inverted rate), of the CPU time of the benchmark's thread.
  state.counters["per_op"] = benchmark::Counter(
      kChainOps, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  guarded(state, [&] {
    const std::int64_t n = state.range(0);
    const std::vector<float> a = host_values(n, 8), b = host_values(n, 9);
    const auto x = Tensor<1>::from_data(TensorData::from_vec(a, {n}), device);
    const auto y = Tensor<1>::from_data(TensorData::from_vec(b, {n}), device);
    float want = a[0];
    for (int i = 0; i < kChainOps / 2; ++i) want = want * b[0] + 0.25f;
    expect_near(read_one(op_chain(x, y)), want, 1e-6, "op_chain");
    for (auto _ : state) {
      auto z = op_chain(x, y);
      if (read) {
        benchmark::DoNotOptimize(read_one(z));
      } else {
        benchmark::DoNotOptimize(z.primitive().get());
      }
    }
  });
}
void op_chain_plain(benchmark::State& state) { run_op_chain(state, kDevice, true); }
void op_chain_fused(benchmark::State& state) { run_op_chain(state, kFused, true); }
void op_chain_fused_record(benchmark::State& state) { run_op_chain(state, kFused, false); }
BENCHMARK(op_chain_plain)->Arg(16)->Arg(4096)->MinTime(0.2);
BENCHMARK(op_chain_fused)->Arg(16)->Arg(4096)->MinTime(0.2);
BENCHMARK(op_chain_fused_record)->Arg(4096)->MinTime(0.2);

// ---- matmul vs cblas_sgemm ----
void matmul(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  state.counters["flops"] = 2.0 * n * n * n;
  guarded(state, [&] {
    auto a = random_matrix(n, n);
    auto b = random_matrix(n, n);
    // Spot check one element against a dot product in double.
    const auto av = a.into_data().to_vec<float>(), bv = b.into_data().to_vec<float>();
    double want = 0;
    for (std::int64_t k = 0; k < n; ++k) want += double(av[k]) * bv[k * n];
    expect_near(read_one(matmul_op(a, b)), want, 1e-4, "matmul[0, 0]");
    for (auto _ : state) benchmark::DoNotOptimize(read_one(matmul_op(a, b)));
  });
}
BENCHMARK(matmul)->Arg(1024)->Arg(2048)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);

// bf16 operands and result (accumulated in f32): oneDNN's bf16 kernels where the CPU has them.
void matmul_bf16(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  state.counters["flops"] = 2.0 * n * n * n;
  guarded(state, [&] {
    auto a = random_matrix(n, n).cast(DType::BF16);
    auto b = random_matrix(n, n).cast(DType::BF16);
    const auto av = a.into_data().to_f64_vec(), bv = b.into_data().to_f64_vec();
    double want = 0;
    for (std::int64_t k = 0; k < n; ++k) want += av[k] * bv[k * n];
    expect_near(read_one(matmul_op(a, b)), want, 2e-2 * std::max(1.0, std::abs(want)),
                "matmul_bf16[0, 0]");
    for (auto _ : state) benchmark::DoNotOptimize(read_one(matmul_op(a, b)));
  });
}
BENCHMARK(matmul_bf16)->Arg(1024)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);

void sgemm(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  state.counters["flops"] = 2.0 * n * n * n;
  const std::vector<float> a = host_values(std::int64_t{n} * n, 3);
  const std::vector<float> b = host_values(std::int64_t{n} * n, 4);
  std::vector<float> c(a.size());
  // The peer at its best: OpenBLAS threading the product itself over every core kiln may use
  // (kiln's CPU backend sets a pthreads OpenBLAS to one thread and splits products itself).
  const int saved = openblas_get_num_threads();
  openblas_set_num_threads(omp_get_max_threads());
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  openblas_set_num_threads(saved);
}
BENCHMARK(sgemm)->Arg(1024)->Arg(2048)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);

// ---- memory-bound: add into a new tensor vs a parallel memcpy ----
void add_large(benchmark::State& state) {
  state.counters["bytes"] = 3.0 * kLarge * kLarge * sizeof(float);  // two reads, one write
  guarded(state, [&] {
    auto x = random_matrix(kLarge, kLarge);
    auto y = random_matrix(kLarge, kLarge);
    expect_near(read_one(x + y), double(read_one(x)) + read_one(y), 1e-6, "add");
    for (auto _ : state) benchmark::DoNotOptimize(read_one(x + y));
  });
}
BENCHMARK(add_large)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);

// memcpy of one 4096² f32 tensor split over the OpenMP threads: 64 MiB read + 64 MiB written.
void memcpy_large(benchmark::State& state) {
  const std::size_t count = static_cast<std::size_t>(kLarge * kLarge);
  state.counters["bytes"] = 2.0 * count * sizeof(float);
  time_parallel_memcpy(state, count);
}
BENCHMARK(memcpy_large)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);

// STREAM's triad a = b + s * c over 4096² f32 on the OpenMP threads: a second bandwidth
// baseline with ordinary stores (glibc's memcpy may pick another store strategy).
void triad_large(benchmark::State& state) {
  const std::int64_t count = kLarge * kLarge;
  state.counters["bytes"] = 3.0 * count * sizeof(float);
  const std::vector<float> b = host_values(count, 6), c = host_values(count, 7);
  std::vector<float> a(static_cast<std::size_t>(count));
  for (auto _ : state) {
    float* out = a.data();
    const float* x = b.data();
    const float* y = c.data();
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < count; ++i) out[i] = x[i] + 3.0f * y[i];
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
}
BENCHMARK(triad_large)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);

// The triad with stores that bypass the caches (as kiln's large outputs are written,
// stream_store.h): no line of the output is read first, so the bytes counted are the bytes moved,
// the bandwidth a fused group's floor is against. x86 CPUs with AVX-512 only (this program is
// not built for the machine's ISA, so the loop is, and runs where the CPU has it).
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) void stream_triad(float* a, const float* x, const float* y,
                                                     std::int64_t count) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < count; i += 16) {
    const __m512 v =
        _mm512_fmadd_ps(_mm512_set1_ps(3.0f), _mm512_loadu_ps(y + i), _mm512_loadu_ps(x + i));
    _mm512_stream_ps(a + i, v);
  }
  _mm_sfence();
}
#endif
void triad_stream_large(benchmark::State& state) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (!__builtin_cpu_supports("avx512f")) {
    state.SkipWithError("streaming triad: this CPU has no AVX-512");
    return;
  }
  const std::int64_t count = kLarge * kLarge;
  state.counters["bytes"] = 3.0 * count * sizeof(float);
  const std::vector<float> b = host_values(count, 6), c = host_values(count, 7);
  std::unique_ptr<float, decltype(&std::free)> a(
      static_cast<float*>(std::aligned_alloc(64, count * sizeof(float))), &std::free);
  std::fill_n(a.get(), count, 0.0f);
  for (auto _ : state) {
    stream_triad(a.get(), b.data(), c.data(), count);
    benchmark::DoNotOptimize(a.get());
    benchmark::ClobberMemory();
  }
#else
  state.SkipWithError("streaming triad: x86 only");
#endif
}
BENCHMARK(triad_stream_large)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);

// ---- eager elementwise chains (DESIGN.md §8 definitions) ----
Tensor<2> chain8(const Tensor<2>& x, const Tensor<2>& y, const Tensor<2>& z) {
  return (-(x * y + z)).exp().mul_scalar(2).add_scalar(1).tanh() * x;
}
Tensor<2> fma_exp(const Tensor<2>& a, const Tensor<2>& b, const Tensor<2>& c) {
  return (a * b + c).exp();
}

// A three-input elementwise workload: 3 inputs read, 1 output written.
template <class Op, class Reference>
void three_input(benchmark::State& state, Op op, Reference reference, const char* name,
                 Device device = kDevice) {
  state.counters["bytes"] = 4.0 * kLarge * kLarge * sizeof(float);
  guarded(state, [&] {
    auto x = random_matrix(kLarge, kLarge, device), y = random_matrix(kLarge, kLarge, device);
    auto z = random_matrix(kLarge, kLarge, device);
    expect_near(read_one(op(x, y, z)), reference(read_one(x), read_one(y), read_one(z)), 1e-5,
                name);
    for (auto _ : state) benchmark::DoNotOptimize(read_one(op(x, y, z)));
  });
}
double chain8_reference(double x, double y, double z) {
  return std::tanh(std::exp(-(x * y + z)) * 2 + 1) * x;
}
double fma_exp_reference(double a, double b, double c) { return std::exp(a * b + c); }
void chain8_large(benchmark::State& state) {
  three_input(state, chain8, chain8_reference, "chain8");
}
BENCHMARK(chain8_large)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
void chain8_fused_large(benchmark::State& state) {
  three_input(state, chain8, chain8_reference, "chain8 fused", kFused);
}
BENCHMARK(chain8_fused_large)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
void fma_exp_large(benchmark::State& state) {
  three_input(state, fma_exp, fma_exp_reference, "fma_exp");
}
BENCHMARK(fma_exp_large)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
void fma_exp_fused_large(benchmark::State& state) {
  three_input(state, fma_exp, fma_exp_reference, "fma_exp fused", kFused);
}
BENCHMARK(fma_exp_fused_large)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);

// ---- dropout (p = 0.1) of a 4096² f32 tensor: 1 input read, 1 output written ----
// As nn::Dropout makes it (a bernoulli(0.9) mask scaled by 1 / 0.9, times x), and as the issue
// writes it (uniform < p, mask_fill, / 0.9). Fused, the numbers are drawn inside the group (the
// same ones, bit for bit) and neither the mask nor the draws are written.
Tensor<2> dropout_by_mask(const Tensor<2>& x) {
  return x * (Tensor<2>::random(x.shape(), Distribution::bernoulli(0.9), x.device()) * (1 / 0.9));
}
Tensor<2> dropout_by_mask_fill(const Tensor<2>& x) {
  const auto drop =
      Tensor<2>::random(x.shape(), Distribution::standard(), x.device()).lower_elem(0.1);
  return x.mask_fill(drop, 0.0) / 0.9;
}
template <class Op>
void run_dropout(benchmark::State& state, Op op, Device device) {
  state.counters["bytes"] = 2.0 * kLarge * kLarge * sizeof(float);
  guarded(state, [&] {
    auto x = random_matrix(kLarge, kLarge, device);
    const double first = read_one(x), got = read_one(op(x));
    if (got != 0) expect_near(got, first / 0.9, 1e-5, "dropout");
    for (auto _ : state) benchmark::DoNotOptimize(read_one(op(x)));
  });
}
void dropout_large(benchmark::State& state) { run_dropout(state, dropout_by_mask, kDevice); }
BENCHMARK(dropout_large)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
void dropout_fused_large(benchmark::State& state) { run_dropout(state, dropout_by_mask, kFused); }
BENCHMARK(dropout_fused_large)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
void dropout_mask_fill_large(benchmark::State& state) {
  run_dropout(state, dropout_by_mask_fill, kDevice);
}
BENCHMARK(dropout_mask_fill_large)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
void dropout_mask_fill_fused_large(benchmark::State& state) {
  run_dropout(state, dropout_by_mask_fill, kFused);
}
BENCHMARK(dropout_mask_fill_fused_large)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.3);

// ---- a normal draw of a 4096² f32 tensor (a model's initialisation): 1 output written; the
// spot check is that the draw's mean and spread are those asked for, within 1% ----
void random_normal_large(benchmark::State& state) {
  state.counters["bytes"] = 1.0 * kLarge * kLarge * sizeof(float);
  guarded(state, [&] {
    const Distribution normal = Distribution::normal(0.5, 2.0);
    const auto sample = Tensor<2>::random({kLarge, kLarge}, normal, kDevice);
    const double mean = sample.mean().into_scalar<double>();
    const double spread = std::sqrt((sample - mean).powf_scalar(2).mean().into_scalar<double>());
    expect_near(mean, 0.5, 0.01 * 2.0, "random_normal mean");
    expect_near(spread, 2.0, 0.01 * 2.0, "random_normal spread");
    for (auto _ : state)
      benchmark::DoNotOptimize(read_one(Tensor<2>::random({kLarge, kLarge}, normal, kDevice)));
  });
}
BENCHMARK(random_normal_large)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);

// ---- the elementwise layer's other paths: broadcast, strided, 16-bit floats, compare ----
// Each reads two 4096² operands (or one and a row) and writes one; the spot check is element
// [0, 0].
// read_one for tensors of any kind.
template <std::size_t D, class K>
double read_first(const Tensor<D, K>& t) {
  return t.slice(std::vector<Slice>(D, Slice(0, 1))).into_data().to_f64_vec()[0];
}

template <class Make, class Op>
void elementwise_case(benchmark::State& state, double bytes, Make make, Op op, double tolerance,
                      const char* name) {
  state.counters["bytes"] = bytes;
  guarded(state, [&] {
    auto [x, y] = make();
    const double want = read_first(op(x.float_(DType::F64), y.float_(DType::F64)));
    expect_near(read_first(op(x, y)), want, tolerance, name);
    for (auto _ : state) benchmark::DoNotOptimize(read_first(op(x, y)));
  });
}
constexpr auto add_op = [](const auto& a, const auto& b) { return a + b; };
void add_row_broadcast(benchmark::State& state) {
  elementwise_case(
      state, 2.0 * kLarge * kLarge * sizeof(float),
      [] {
        return std::pair{random_matrix(kLarge, kLarge), random_matrix(1, kLarge)};
      },
      add_op, 1e-6, "add_row_broadcast");
}
BENCHMARK(add_row_broadcast)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
void add_transposed(benchmark::State& state) {
  elementwise_case(
      state, 3.0 * kLarge * kLarge * sizeof(float),
      [] {
        return std::pair{random_matrix(kLarge, kLarge).transpose(), random_matrix(kLarge, kLarge)};
      },
      add_op, 1e-6, "add_transposed");
}
BENCHMARK(add_transposed)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
void add_bf16(benchmark::State& state) {
  elementwise_case(
      state, 3.0 * kLarge * kLarge * 2,
      [] {
        return std::pair{random_matrix(kLarge, kLarge).cast(DType::BF16),
                         random_matrix(kLarge, kLarge).cast(DType::BF16)};
      },
      add_op, 1e-2, "add_bf16");
}
BENCHMARK(add_bf16)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
void add_f16(benchmark::State& state) {
  elementwise_case(
      state, 3.0 * kLarge * kLarge * 2,
      [] {
        return std::pair{random_matrix(kLarge, kLarge).cast(DType::F16),
                         random_matrix(kLarge, kLarge).cast(DType::F16)};
      },
      add_op, 1e-3, "add_f16");
}
BENCHMARK(add_f16)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
void add_i32(benchmark::State& state) {
  elementwise_case(
      state, 3.0 * kLarge * kLarge * 4,
      [] {
        return std::pair{random_matrix(kLarge, kLarge).mul_scalar(1000).int_().cast(DType::I32),
                         random_matrix(kLarge, kLarge).mul_scalar(1000).int_().cast(DType::I32)};
      },
      add_op, 0, "add_i32");
}
BENCHMARK(add_i32)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
void greater_large(benchmark::State& state) {
  elementwise_case(
      state, 2.0 * kLarge * kLarge * sizeof(float) + kLarge * kLarge,
      [] {
        return std::pair{random_matrix(kLarge, kLarge), random_matrix(kLarge, kLarge)};
      },
      [](const auto& a, const auto& b) { return a.greater(b).float_(DType::F32); }, 0,
      "greater_large");
}
BENCHMARK(greater_large)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
void sigmoid_large(benchmark::State& state) {
  elementwise_case(
      state, 2.0 * kLarge * kLarge * sizeof(float),
      [] {
        return std::pair{random_matrix(kLarge, kLarge), random_matrix(1, 1)};
      },
      [](const auto& a, const auto&) { return activation::sigmoid(a); }, 1e-6, "sigmoid_large");
}
BENCHMARK(sigmoid_large)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);

// ---- conv2d 3x3, batch 16, 64 -> 64 channels, 56x56, padding 1 ----
void conv2d(benchmark::State& state) {
  constexpr std::int64_t batch = 16, channels = 64, side = 56;
  state.counters["flops"] = 2.0 * batch * channels * side * side * channels * 9;
  guarded(state, [&] {
    auto x =
        Tensor<4>::random({batch, channels, side, side}, Distribution::uniform(-1, 1), kDevice);
    auto w = Tensor<4>::random({channels, channels, 3, 3}, Distribution::uniform(-1, 1), kDevice);
    const ConvOptions options{.stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}};
    // Output [0, 0, 0, 0] sees input rows and columns 0..1 (padding covers the rest) through
    // kernel taps 1..2.
    const auto xv = x.slice({{0, 1}, Slice::all(), {0, 2}, {0, 2}}).into_data().to_f64_vec();
    const auto wv = w.slice({{0, 1}, Slice::all(), {1, 3}, {1, 3}}).into_data().to_f64_vec();
    double want = 0;
    for (std::size_t i = 0; i < xv.size(); ++i) want += xv[i] * wv[i];
    expect_near(read_one(conv2d_op(x, w, options)), want, 1e-4, "conv2d");
    for (auto _ : state) {
      benchmark::DoNotOptimize(read_one(conv2d_op(x, w, options)));
    }
  });
}
BENCHMARK(conv2d)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);

// ---- the gradients of that convolution (the backend's ops, as autodiff's rules call them) ----
// Each row checks one element against float64 sums over the values that reach it.
void conv2d_backward(benchmark::State& state, bool input_grad) {
  constexpr std::int64_t batch = 16, channels = 64, side = 56;
  state.counters["flops"] = 2.0 * batch * channels * side * side * channels * 9;
  guarded(state, [&] {
    const auto uniform = Distribution::uniform(-1, 1);
    auto x = Tensor<4>::random({batch, channels, side, side}, uniform, kDevice);
    auto w = Tensor<4>::random({channels, channels, 3, 3}, uniform, kDevice);
    auto g = Tensor<4>::random({batch, channels, side, side}, uniform, kDevice);
    const ConvOptions options{.stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}};
    Backend& backend = backend_for(kDevice);
    const auto run = [&] {
      return Tensor<4>::from_primitive(
          input_grad
              ? backend.conv_x_backward(x.primitive(), w.primitive(), g.primitive(), options)
              : backend.conv_weight_backward(x.primitive(), w.primitive(), g.primitive(), options));
    };
    double want = 0;
    if (input_grad) {
      // dx[0, 0, 0, 0] = sum over c, i, j < 2 of g[0, c, i, j] w[c, 0, 1 - i, 1 - j].
      const auto gv = g.slice({{0, 1}, Slice::all(), {0, 2}, {0, 2}}).into_data().to_f64_vec();
      const auto wv = w.slice({Slice::all(), {0, 1}, {0, 2}, {0, 2}}).into_data().to_f64_vec();
      for (std::size_t c = 0; c < static_cast<std::size_t>(channels); ++c)
        for (std::size_t i = 0; i < 2; ++i)
          for (std::size_t j = 0; j < 2; ++j)
            want += gv[c * 4 + i * 2 + j] * wv[c * 4 + (1 - i) * 2 + (1 - j)];
    } else {
      // dw[0, 0, 1, 1] (the centre tap) = sum over images and positions of g[n, 0] x[n, 0].
      const auto gv = g.slice({Slice::all(), {0, 1}}).into_data().to_f64_vec();
      const auto xv = x.slice({Slice::all(), {0, 1}}).into_data().to_f64_vec();
      for (std::size_t i = 0; i < gv.size(); ++i) want += gv[i] * xv[i];
    }
    const float got =
        input_grad ? read_one(run())
                   : run().slice({{0, 1}, {0, 1}, {1, 2}, {1, 2}}).into_data().to_vec<float>()[0];
    expect_near(got, want, 1e-3, input_grad ? "conv2d_x_backward" : "conv2d_weight_backward");
    for (auto _ : state) {
      benchmark::DoNotOptimize(read_one(run()));
    }
  });
}
void conv2d_x_backward(benchmark::State& state) { conv2d_backward(state, true); }
BENCHMARK(conv2d_x_backward)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
void conv2d_weight_backward(benchmark::State& state) { conv2d_backward(state, false); }
BENCHMARK(conv2d_weight_backward)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);

// ---- softmax along the last dim of 4096² ----
void run_softmax(benchmark::State& state, Device device) {
  state.counters["bytes"] = 2.0 * kLarge * kLarge * sizeof(float);
  guarded(state, [&] {
    auto x = random_matrix(kLarge, kLarge, device);
    const auto row = x.slice({{0, 1}}).into_data().to_f64_vec();
    double total = 0;
    for (double v : row) total += std::exp(v);
    expect_near(read_one(softmax_op(x, 1)), std::exp(row[0]) / total, 1e-4, "softmax");
    for (auto _ : state) benchmark::DoNotOptimize(read_one(softmax_op(x, 1)));
  });
}
void softmax_large(benchmark::State& state) { run_softmax(state, kDevice); }
BENCHMARK(softmax_large)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
void softmax_fused_large(benchmark::State& state) { run_softmax(state, kFused); }
BENCHMARK(softmax_fused_large)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);

}  // namespace

BENCHMARK_MAIN();
