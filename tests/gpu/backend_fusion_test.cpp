// The fusion decorator on cuda:0 (src/backends/cuda/cuda_fused.cpp): a group's elementwise steps
// run as one generated kernel whose results equal the unfused device's, with transposed and
// broadcast operands, comparisons and masks: bit for bit where every value is rounded to f16 or
// bf16 between ops, and in f32 and f64 within the error that NVRTC's contraction of one op's
// multiply and the next op's add into one fused multiply-add (one rounding instead of two) makes
// after exp and tanh (the fusion checker's tolerance); a failing
// integer op inside a fused kernel is an ExecutionError at the read naming that op; a training
// loop's groups compile once whatever their scalars and sizes; a product followed by a bias and
// relu or gelu is one cuBLASLt call (its epilogue), within the rounding of a float64 reference.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "contract/fused_program.h"
#include "decorators/fusion/fusion_backend.h"
#include "gpu/gpu_test_support.h"
#include "runtime/registry.h"
#include "support/epilogue_decorator.h"
#include "support/scoped_env.h"

using namespace kiln;

namespace gpu_fusion_test {

Tensor<2> random_on(const Device& device, Shape shape, DType dtype, std::uint64_t seed) {
  return Tensor<2>::wrap(test::host_random(shape, dtype, seed, -2, 2)).to_device(device);
}

// Eleven ops over a [rows, 300] tensor, a transposed [300, rows] one and a broadcast [1, 300]
// row: arithmetic, scalars, transcendentals, a clamp, a comparison and a mask.
Tensor<2> chain(const Tensor<2>& x, const Tensor<2>& yt, const Tensor<2>& b, double scale) {
  const Tensor<2> y = yt.transpose();
  const Tensor<2> t = ((x * y + b).exp() * scale - x).tanh().clamp(-0.9, 0.9);
  return t.mask_where(x.greater(y), b) + y.abs().sqrt();
}

std::vector<std::byte> bytes_of(const Tensor<2>& t) {
  const TensorData data = t.into_data();
  return {data.bytes().begin(), data.bytes().end()};
}

// got equals want: bit for bit in f16 and bf16; in f32 and f64 within 1e-5 and 1e-12 of the
// value's magnitude (of 1 near zero): a contracted multiply-add's rounding, grown by exp.
void expect_equal_values(const Tensor<2>& got, const Tensor<2>& want, const std::string& what) {
  const DType dtype = want.dtype();
  if (dtype == DType::F16 || dtype == DType::BF16) {
    EXPECT_EQ(bytes_of(got), bytes_of(want)) << what;
    return;
  }
  const double tolerance = dtype == DType::F64 ? 1e-12 : 1e-5;
  const std::vector<double> g = got.into_data().to_f64_vec(), w = want.into_data().to_f64_vec();
  ASSERT_EQ(g.size(), w.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i) {
    ASSERT_LE(std::abs(g[i] - w[i]), tolerance * std::max(1.0, std::abs(w[i])))
        << what << " at " << i << ": " << g[i] << " vs " << w[i];
  }
}

// Reading t fails with an ExecutionError naming div and its division by zero.
template <class T>
void expect_division_by_zero_at_read(const T& t) {
  try {
    (void)t.into_data();
    FAIL() << "no error";
  } catch (const ExecutionError& error) {
    EXPECT_NE(std::string(error.what()).find("div"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("division by zero"), std::string::npos)
        << error.what();
  }
}

}  // namespace gpu_fusion_test

TEST(GpuFusion, ChainsEqualTheUnfusedDeviceInEveryFloatDType) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  const Device fused = device.fused();
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    const Tensor<2> x = random_on(device, {64, 300}, dtype, 1);
    const Tensor<2> yt = random_on(device, {300, 64}, dtype, 2);
    const Tensor<2> b = random_on(device, {1, 300}, dtype, 3);
    const Tensor<2> want = chain(x, yt, b, 0.5);
    const Tensor<2> got = chain(x.to_device(fused), yt.to_device(fused), b.to_device(fused), 0.5);
    EXPECT_EQ(got.device(), fused);
    expect_equal_values(got, want, std::string(dtype_name(dtype)));
  }
}

// A bias row and a value per row (whole, or every other element of a wider tensor) over a
// [rows, 512] chain run as kiln_fused_rows (one vector of each output per thread), equal to the
// unfused device in every float dtype; 510 columns (no whole vectors per row) take the strided
// kernel and agree as well.
TEST(GpuFusion, BroadcastRowsAndPerRowValuesEqualTheUnfusedDevice) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  const Device fused = device.fused();
  auto program = [](const Tensor<2>& x, const Tensor<2>& b, const Tensor<2>& m) {
    return activation::relu(x * 1.5 + b) - m * x;
  };
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (std::int64_t cols : {512, 510}) {
      for (bool strided : {false, true}) {
        const auto seed = static_cast<std::uint64_t>(cols + (strided ? 7 : 0));
        const Tensor<2> x = random_on(device, {96, cols}, dtype, seed);
        const Tensor<2> b = random_on(device, {1, cols}, dtype, seed + 1);
        const Tensor<2> m =
            strided ? random_on(device, {96, 2}, dtype, seed + 2).slice({{0, 96}, {1, 2}})
                    : random_on(device, {96, 1}, dtype, seed + 2);
        const Tensor<2> want = program(x, b, m);
        const Tensor<2> got = program(x.to_device(fused), b.to_device(fused), m.to_device(fused));
        expect_equal_values(got, want,
                            std::string(dtype_name(dtype)) + " cols " + std::to_string(cols) +
                                (strided ? " strided" : ""));
      }
    }
  }
}

// A group run again with the same structure, shapes, strides and scalars runs the plan its first
// run made (cuda_fused.cpp): the captured kernels on the new tensors, the steps that could not be
// captured (a softmax over a leaf) eagerly before them. New scalars or new strides capture anew.
// Every run equals the unfused device on its own inputs.
TEST(GpuFusion, AGroupRunAgainRunsItsPlanOnNewTensorsAndNewScalarsCaptureAnew) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  const Device fused = device.fused();
  // held (written once), and a tail over a chain that reads it and a leaf's softmax (which
  // runs eagerly inside the group).
  struct Result {
    Tensor<2> held, sum;
  };
  auto program = [](const Tensor<2>& x, const Tensor<2>& yt, const Tensor<2>& b, double scale) {
    Tensor<2> held = chain(x, yt, b, scale);
    const Tensor<2> s = activation::softmax(x, 1) * 2.0;
    Tensor<2> sum = (held * s + scale).sum_dim(1);
    return Result{std::move(held), std::move(sum)};
  };
  for (int run = 0; run < 8; ++run) {
    const auto seed = static_cast<std::uint64_t>(10 * run);
    const double scale = run < 5 ? 0.5 : 0.25;  // runs 5 to 7: other scalars
    const Tensor<2> x = random_on(device, {64, 300}, DType::F32, seed);
    // runs 3 and 7: yt a transposed view, so the chain reads y contiguous (other strides)
    const Tensor<2> yt = run % 4 == 3
                             ? random_on(device, {64, 300}, DType::F32, seed + 1).transpose()
                             : random_on(device, {300, 64}, DType::F32, seed + 1);
    const Tensor<2> b = random_on(device, {1, 300}, DType::F32, seed + 2);
    const Result want = program(x, yt, b, scale);
    const Result got = program(x.to_device(fused), yt.to_device(fused), b.to_device(fused), scale);
    const std::string what = "run " + std::to_string(run);
    expect_equal_values(got.sum, want.sum, what);
    expect_equal_values(got.held, want.held, what + " (held)");
  }
}

// A random step is captured into its group's kernel, drawing at the place reserved at its call
// (its counter is the kernel's flat index): the dropout's values equal the unfused device's bit
// for bit (one multiply per op: nothing to contract), and an eager draw between the call and the
// read moves nothing; the group is one kernel whose module compiles once whatever the seed.
TEST(GpuFusion, ARandomDrawsInsideItsGroupsKernelAsTheUnfusedDeviceDraws) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  const Device fused = device.fused();
  auto dropout = [](const Device& on, std::uint64_t seed) {
    on.seed(seed);
    const Tensor<2> x = random_on(on, {256, 300}, DType::F32, 7);
    const Tensor<2> mask = Tensor<2>::random({256, 300}, Distribution::bernoulli(0.9), on);
    const Tensor<2> between = Tensor<2>::random({4, 4}, Distribution::normal(0, 1), on);
    const Tensor<2> y = x * (mask * (1 / 0.9));
    (void)between.into_data();  // drawn after the mask, read before it
    return std::pair{bytes_of(y), bytes_of(mask)};
  };
  EXPECT_EQ(dropout(fused, 5), dropout(device, 5));
  const std::int64_t compiles = device.kernel_stats().compiles;
  EXPECT_EQ(dropout(fused, 6), dropout(device, 6));
  EXPECT_EQ(device.kernel_stats().compiles, compiles) << "the seed is a launch parameter";
}

TEST(GpuFusion, AGroupCompilesOnceWhateverItsScalarsAndSizes) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  const Device fused = device.fused();
  auto run = [&](std::int64_t rows, double scale) {
    const Tensor<2> x = random_on(fused, {rows, 300}, DType::F32, 4);
    const Tensor<2> yt = random_on(fused, {300, rows}, DType::F32, 5);
    const Tensor<2> b = random_on(fused, {1, 300}, DType::F32, 6);
    const Tensor<2> want =
        chain(x.to_device(device), yt.to_device(device), b.to_device(device), scale);
    expect_equal_values(chain(x, yt, b, scale), want, std::to_string(rows) + " rows");
  };
  run(64, 0.5);
  const std::int64_t compiles = device.kernel_stats().compiles;
  run(64, 0.25);
  run(96, 3.0);
  run(1000, -1.0);
  EXPECT_EQ(device.kernel_stats().compiles, compiles);
  EXPECT_EQ(fused.kernel_stats().compiles, compiles);  // one count per GPU, whatever the flags
  EXPECT_EQ(Device::cpu().kernel_stats().compiles, 0);
}

TEST(GpuFusion, AnIntegerDivisionByZeroInAFusedKernelIsAnExecutionErrorNamingTheOp) {
  KILN_REQUIRE_GPU();
  const Device fused = device.fused();
  const auto x = Tensor<1, Int>::arange(0, 6000, fused).reshape({60, 100});
  const auto zero = x - x;               // recorded: computed inside the kernel
  const auto q = (x * 3).div(zero) + 1;  // the read runs the group: x*3, x-x, div, +1
  gpu_fusion_test::expect_division_by_zero_at_read(q);
  // The device keeps working after the error.
  const auto ok = (x * 2 + 1).into_data().to_f64_vec();
  EXPECT_EQ(ok[5999], 2.0 * 5999 + 1);
}

TEST(GpuFusion, AnElementwisePrologueThenSoftmaxEqualsTheUnfusedDevice) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  const Device fused = device.fused();
  const Tensor<2> x = random_on(device, {128, 1000}, DType::F32, 7);
  const Tensor<2> b = random_on(device, {1, 1000}, DType::F32, 8);
  auto f = [](const Tensor<2>& x, const Tensor<2>& b) {
    const Tensor<2> s = activation::softmax((x * 2.0 + b).tanh(), 1);
    return s * 3.0 - 1.0;  // an elementwise epilogue after the op along a dim
  };
  expect_equal_values(f(x.to_device(fused), b.to_device(fused)), f(x, b), "softmax");
}

// ---- a reduction or softmax along a dim as the last step of a fused kernel ----------------------
// The chain runs in registers inside the reduction's (or softmax's) own kernels: the same
// launches as the reduction alone; its accumulation is the unfused one's, on the same values in
// the same order, so results agree as the chains' do (maxima, minima and their indices exactly),
// against the unfused device and a float64 CPU run.

namespace gpu_fusion_test {

// The op along a dim that ends a chain.
struct Tail {
  const char* name;
  Primitive (*run)(Primitive, std::int64_t);
  bool exact;  // maxima and minima pick an element: equal bit for bit in every dtype
};
const Tail kSum{"sum_dim", detail::sum_dim, false}, kMean{"mean_dim", detail::mean_dim, false},
    kProd{"prod_dim", detail::prod_dim, false}, kMax{"max_dim", detail::max_dim, true},
    kMin{"min_dim", detail::min_dim, true},
    kLogSumExp{"logsumexp_dim", detail::logsumexp_dim, false},
    kSoftmax{"softmax", detail::softmax, false},
    kLogSoftmax{"log_softmax", detail::log_softmax, false},
    kSoftmin{"softmin", detail::softmin, false};
const Tail* const kTails[] = {&kSum,       &kMean,    &kProd,       &kMax,    &kMin,
                              &kLogSumExp, &kSoftmax, &kLogSoftmax, &kSoftmin};

// The chain's inputs on the CPU: x of the iteration shape, y and b; strided: y stored
// transposed (read through a permuted view) and b broadcast along dim 0, else both of the
// iteration shape (the chain's flat form).
struct Inputs {
  Primitive x, y, b;
  bool strided;
};
Inputs inputs_of(const Shape& shape, DType dtype, std::uint64_t seed, bool strided = true) {
  Shape y_shape = shape, b_shape = shape;
  if (strided) {
    for (std::size_t k = 0; k < shape.rank(); ++k) y_shape[k] = shape[shape.rank() - 1 - k];
    b_shape[0] = 1;
  }
  const bool ints = !is_float(dtype);
  return {test::host_random(shape, dtype, seed, -2, 2, ints),
          test::host_random(y_shape, dtype, seed + 1, -2, 2, ints),
          test::host_random(b_shape, dtype, seed + 2, -2, 2, ints), strided};
}

Primitive as(const Primitive& p, DType dtype) {
  return p->dtype() == dtype ? p : detail::cast(p, dtype);
}

// The chain on device d in dtype (F64 for the CPU reference): floats exp((x - b) * y * 0.05),
// which no multiply-add contraction changes, so extrema compare exactly; integers
// (x - b) * y + 3.
Primitive chain(const Inputs& in, Device d, DType dtype) {
  const Primitive x = as(test::on(in.x, d), dtype);
  Primitive y = as(test::on(in.y, d), dtype);
  if (in.strided) {
    std::vector<std::int64_t> axes(y->shape().rank());
    for (std::size_t k = 0; k < axes.size(); ++k)
      axes[k] = static_cast<std::int64_t>(axes.size() - 1 - k);
    y = detail::permute(y, axes);
  }
  const Primitive b = as(test::on(in.b, d), dtype);
  const Primitive t = detail::mul(detail::sub(x, b), y);
  if (!is_float(dtype)) return detail::add_scalar(t, Scalar(3));
  return detail::exp(detail::mul_scalar(t, Scalar(0.05)));
}

std::vector<double> values_of(const Primitive& p) { return detail::into_data(p).to_f64_vec(); }

// got equals want (the unfused device's): bit for bit where exact or in f16, bf16 and integers;
// else within the fusion checker's tolerance (1e-5 and 1e-12 of the magnitude, of 1 near zero).
void expect_same_as_unfused(const Primitive& got, const Primitive& want, bool exact,
                            const std::string& what) {
  ASSERT_EQ(got->shape(), want->shape()) << what;
  ASSERT_EQ(got->dtype(), want->dtype()) << what;
  const DType dtype = want->dtype();
  const bool bits = exact || !(dtype == DType::F32 || dtype == DType::F64);
  const double tolerance = bits ? 0 : dtype == DType::F64 ? 1e-12 : 1e-5;
  const std::vector<double> g = values_of(got), w = values_of(want);
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i]) && std::isnan(w[i])) continue;
    ASSERT_LE(std::abs(g[i] - w[i]), tolerance * std::max(1.0, std::abs(w[i])))
        << what << " at " << i << ": " << g[i] << " vs " << w[i];
  }
}

// got near the float64 CPU run: a few roundings of the dtype per element, summed.
void expect_near_reference(const Primitive& got, const Primitive& reference,
                           const std::string& what) {
  const double tolerance = 10 * test::tolerance_of(got->dtype());
  const std::vector<double> g = values_of(got), w = values_of(reference);
  ASSERT_EQ(g.size(), w.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i) {
    ASSERT_LE(std::abs(g[i] - w[i]), tolerance * (1 + std::abs(w[i])))
        << what << " against the CPU at " << i << ": " << g[i] << " vs " << w[i];
  }
}

// Kernels asked of the GPU's compiler: one per launch (found loaded, on disk or compiled).
std::int64_t kernel_requests(const Device& device) {
  const KernelStats s = device.kernel_stats();
  return s.compiles + s.memory_hits + s.disk_hits;
}

// The launches of tail over the chain's value written out (a fresh contiguous tensor, which
// the fused kernel plans its reads as): all that the fused group may launch.
std::int64_t launches_of_tail_alone(const Inputs& in, const Tail& tail, std::int64_t dim,
                                    const Device& device) {
  const Primitive written = chain(in, device, DType::F32);
  const std::int64_t before = kernel_requests(device);
  (void)values_of(tail.run(written, dim));
  return kernel_requests(device) - before;
}

}  // namespace gpu_fusion_test

TEST(GpuFusion, ChainsEndingInAReductionOrSoftmaxEqualTheUnfusedDeviceAndTheCpu) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  // Along the first, a middle and the last dim of 2-D and 3-D shapes, strided and broadcast
  // inputs; the dtypes rotate so that every op meets several and every (shape, dim) all four.
  struct Along {
    Shape shape;
    std::int64_t dim;
  };
  const Along alongs[] = {
      {{64, 300}, 0}, {{64, 300}, 1}, {{6, 40, 50}, 0}, {{6, 40, 50}, 1}, {{6, 40, 50}, 2}};
  std::size_t i = 0;
  for (const Tail* tail : kTails) {
    for (const Along& a : alongs) {
      const DType dtype = test::kFloatDTypes[i++ % 4];
      const std::string what = std::string(tail->name) + " " + std::string(dtype_name(dtype)) +
                               " " + a.shape.to_string() + " dim " + std::to_string(a.dim);
      const Inputs in = inputs_of(a.shape, dtype, i, i % 3 != 0);
      const Primitive fused = tail->run(chain(in, device.fused(), dtype), a.dim);
      expect_same_as_unfused(fused, tail->run(chain(in, device, dtype), a.dim), tail->exact, what);
      expect_near_reference(fused, tail->run(chain(in, Device::cpu(), DType::F64), a.dim), what);
    }
  }
}

TEST(GpuFusion, IntegerChainsEndingInAReductionEqualTheUnfusedDeviceAndTheCpu) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  // Integer sums and products wrap in 64 bits as on the CPU: equal exactly.
  std::uint64_t seed = 0;
  for (const Tail* tail : {&kSum, &kProd, &kMax, &kMin}) {
    for (DType dtype : {DType::I32, DType::I64, DType::I16}) {
      for (std::int64_t dim : {0, 1}) {
        const std::string what = std::string(tail->name) + " " + std::string(dtype_name(dtype)) +
                                 " dim " + std::to_string(dim);
        const Inputs in = inputs_of(Shape{64, 300}, dtype, ++seed);
        const Primitive fused = tail->run(chain(in, device.fused(), dtype), dim);
        expect_same_as_unfused(fused, tail->run(chain(in, device, dtype), dim), true, what);
        expect_same_as_unfused(fused, tail->run(chain(in, Device::cpu(), dtype), dim), true,
                               what + " (cpu)");
      }
    }
  }
}

TEST(GpuFusion, AChainAndItsReductionAreOneGroupLaunchingOnlyTheReductionsKernels) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  auto& fusion = static_cast<fusion::FusionPassthrough&>(backend_for(device.fused()));
  // Lines, columns, softmax rows and long strided lines (read twice), flat and strided chains.
  struct Case {
    const Tail* tail;
    std::int64_t dim;
    bool strided;
  };
  const Case cases[] = {{&kSum, 1, false},    {&kSum, 0, true},         {&kMax, 0, false},
                        {&kSoftmax, 1, true}, {&kLogSoftmax, 0, false}, {&kMean, 1, true},
                        {&kSoftmin, 1, false}};
  for (const Case& c : cases) {
    const std::string what = std::string(c.tail->name) + " dim " + std::to_string(c.dim) +
                             (c.strided ? " strided" : " flat");
    const Inputs in = inputs_of(Shape{128, 400}, DType::F32, 40, c.strided);
    const std::int64_t alone = launches_of_tail_alone(in, *c.tail, c.dim, device);

    std::vector<std::size_t> group_steps;
    fusion.set_result_hook_for_tests([&](const FusedProgram& program, std::vector<Primitive>&) {
      group_steps.push_back(program.steps.size());
    });
    const Primitive result = c.tail->run(chain(in, device.fused(), DType::F32), c.dim);
    const std::int64_t before = kernel_requests(device);
    (void)values_of(result);
    const std::int64_t launches = kernel_requests(device) - before;
    fusion.set_result_hook_for_tests(nullptr);

    // softmin alone is neg, then softmax: the fused group runs neg inside softmax's kernel.
    EXPECT_EQ(launches, alone - (c.tail == &kSoftmin ? 1 : 0)) << what;
    // One group of sub, mul, mul_scalar, exp and the op along the dim.
    ASSERT_EQ(group_steps.size(), 1u) << what;
    EXPECT_EQ(group_steps[0], 5u) << what;
    expect_same_as_unfused(result, c.tail->run(chain(in, device, DType::F32), c.dim), c.tail->exact,
                           what);
  }
}

TEST(GpuFusion, AHeldIntermediateIsWrittenOnceByTheReductionsKernel) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  // Rows kept in registers, columns, and long rows and lines that softmax reads twice (the
  // held value is stored on the first read only).
  struct Case {
    const Tail* tail;
    Shape shape;
    std::int64_t dim;
  };
  const Case cases[] = {{&kSum, {64, 300}, 1},
                        {&kMax, {64, 300}, 0},
                        {&kSoftmax, {4, 100000}, 1},
                        {&kLogSoftmax, {300, 64}, 0}};
  for (const Case& c : cases) {
    const std::string what = std::string(c.tail->name) + " " + c.shape.to_string();
    const Inputs in = inputs_of(c.shape, DType::F32, 50);
    const std::int64_t alone = launches_of_tail_alone(in, *c.tail, c.dim, device);
    const Primitive held = chain(in, device.fused(), DType::F32);
    const Primitive result = c.tail->run(held, c.dim);
    const std::int64_t before = kernel_requests(device);
    (void)values_of(result);
    (void)values_of(held);
    EXPECT_EQ(kernel_requests(device) - before, alone) << what;
    const Primitive written = chain(in, device, DType::F32);
    expect_same_as_unfused(held, written, false, what + " (held)");
    expect_same_as_unfused(result, c.tail->run(written, c.dim), c.tail->exact, what);
  }
}

TEST(GpuFusion, OpsAfterAReductionReadingTheChainAgainRunAfterIt) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  // A hand-written softmax: x - max(x) reads the chain's value after the reduction, which
  // then writes it.
  auto manual = [](const Primitive& v) {
    const Primitive e = detail::exp(detail::sub(v, detail::max_dim(v, 1)));
    return detail::div(e, detail::sum_dim(e, 1));
  };
  const Inputs in = inputs_of(Shape{64, 300}, DType::F32, 60);
  const Primitive fused = manual(chain(in, device.fused(), DType::F32));
  expect_same_as_unfused(fused, manual(chain(in, device, DType::F32)), false, "manual softmax");
  expect_near_reference(fused, manual(chain(in, Device::cpu(), DType::F64)), "manual softmax");
}

TEST(GpuFusion, AnIntegerDivisionByZeroBeforeAReductionIsAnExecutionErrorNamingTheOp) {
  KILN_REQUIRE_GPU();
  const Device fused = device.fused();
  const auto x = Tensor<1, Int>::arange(0, 6000, fused).reshape({60, 100});
  const auto zero = x - x;
  const auto s = ((x * 3).div(zero) + 1).sum_dim(1);  // the chain runs inside the sum's kernel
  gpu_fusion_test::expect_division_by_zero_at_read(s);
  // The device keeps working after the error.
  const auto ok = (x * 2 + 1).sum_dim(1).into_data().to_f64_vec();
  EXPECT_EQ(ok[59], (5900.0 + 5999.0) * 100 + 100);
}

TEST(GpuFusion, AChainAndItsReductionCompileOnceWhateverTheirScalarsAndSizes) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  auto run = [&](std::int64_t rows, double scale) {
    const Inputs in = inputs_of(Shape{rows, 300}, DType::F32, 70);
    auto f = [&](Device d) {
      return detail::sum_dim(detail::mul_scalar(chain(in, d, DType::F32), Scalar(scale)), 1);
    };
    expect_same_as_unfused(f(device.fused()), f(device), false, std::to_string(rows) + " rows");
  };
  run(64, 0.5);
  const std::int64_t compiles = device.kernel_stats().compiles;
  run(64, 0.25);
  run(96, 3.0);
  run(1000, -1.0);
  EXPECT_EQ(device.kernel_stats().compiles, compiles);
}

namespace gpu_fusion_test {

// Reductions the fusion decorator does not record (no F in ops.def) end a program built here.
Primitive argmax_i64(Backend& b, Primitive x, std::int64_t dim) {
  return b.argmax(std::move(x), dim, DType::I64);
}
Primitive argmin_i32(Backend& b, Primitive x, std::int64_t dim) {
  return b.argmin(std::move(x), dim, DType::I32);
}
Primitive any_dim(Backend& b, Primitive x, std::int64_t dim) {
  return b.any_dim(std::move(x), dim);
}
Primitive all_dim(Backend& b, Primitive x, std::int64_t dim) {
  return b.all_dim(std::move(x), dim);
}
template <Primitive (*Reduce)(Backend&, Primitive, std::int64_t)>
Primitive run_reduce(Backend& b, std::span<Primitive> v, const StepParams& p, const Shape&) {
  return Reduce(b, std::move(v[0]), p.dim);
}

FusedStep step_of(OpCode op, DType dtype, Shape shape, std::array<std::int32_t, 3> inputs,
                  std::uint8_t arity, StepRun run) {
  FusedStep step;
  step.op = op;
  step.dtype = dtype;
  step.shape = std::move(shape);
  step.inputs = inputs;
  step.arity = arity;
  step.run = run;
  return step;
}

}  // namespace gpu_fusion_test

TEST(GpuFusion, ProgramsEndingInArgmaxArgminAnyOrAllRunAsTheReductionsKernels) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  Backend& cuda = backend_for(device);
  const Shape shape{64, 300};
  const Inputs in = inputs_of(shape, DType::F16, 80);
  struct Case {
    const char* name;
    OpCode op;
    DType dtype;
    Primitive (*reduce)(Backend&, Primitive, std::int64_t);
    StepRun run;
    bool compare;  // a comparison to Bool first
  };
  const Case cases[] = {
      {"argmax", OpCode::argmax, DType::I64, argmax_i64, run_reduce<argmax_i64>, false},
      {"argmin", OpCode::argmin, DType::I32, argmin_i32, run_reduce<argmin_i32>, false},
      {"any_dim", OpCode::any_dim, DType::Bool, any_dim, run_reduce<any_dim>, true},
      {"all_dim", OpCode::all_dim, DType::Bool, all_dim, run_reduce<all_dim>, true},
  };
  const StepRun mul = [](Backend& b, std::span<Primitive> v, const StepParams&, const Shape&) {
    return b.mul(std::move(v[0]), std::move(v[1]));
  };
  const StepRun greater = [](Backend& b, std::span<Primitive> v, const StepParams&, const Shape&) {
    return b.greater_elem(std::move(v[0]), Scalar(-0.5));
  };
  for (const Case& c : cases) {
    for (std::int64_t dim : {0, 1}) {
      const std::string what = std::string(c.name) + " dim " + std::to_string(dim);
      FusedProgram program;
      program.shape = shape;
      program.leaves = {test::on(in.x, device), detail::permute(test::on(in.y, device), {1, 0})};
      program.steps.push_back(step_of(OpCode::mul, DType::F16, shape, {0, 1, 0}, 2, mul));
      if (c.compare) {
        program.steps.push_back(
            step_of(OpCode::greater_elem, DType::Bool, shape, {2, 0, 0}, 1, greater));
      }
      Shape reduced = shape;
      reduced[static_cast<std::size_t>(dim)] = 1;
      const auto last = static_cast<std::int32_t>(program.leaves.size() + program.steps.size());
      program.steps.push_back(step_of(c.op, c.dtype, reduced, {last - 1, 0, 0}, 1, c.run));
      program.steps.back().params.dim = dim;
      program.outputs = {static_cast<std::int32_t>(program.steps.size() - 1)};

      // The reduction alone over its input written out: all the fused program may launch.
      Primitive written = cuda.mul(program.leaves[0], program.leaves[1]);
      if (c.compare) written = cuda.greater_elem(written, Scalar(-0.5));
      const std::int64_t before_alone = kernel_requests(device);
      (void)values_of(c.reduce(cuda, written, dim));
      const std::int64_t alone = kernel_requests(device) - before_alone;

      const std::int64_t before = kernel_requests(device);
      const std::vector<Primitive> got = cuda.run_fused(program);
      (void)values_of(got[0]);
      EXPECT_EQ(kernel_requests(device) - before, alone) << what;
      expect_same_as_unfused(got[0], run_steps(cuda, program)[0], true, what);
    }
  }
}

namespace gpu_fusion_test {

// act(x · w + bias) in float64 loops on the host, and the bound of a product's error per element:
// the dtype's rounding of the result plus k f32 (f64) accumulation roundings, of the sum of the
// terms' magnitudes (what cancellation can leave of them).
struct ProductReference {
  std::vector<double> value, bound;
};
ProductReference product_reference(const Tensor<2>& x, const Tensor<2>& w, const Tensor<2>* bias,
                                   bool relu, bool gelu) {
  const std::vector<double> xs = x.into_data().to_f64_vec(), ws = w.into_data().to_f64_vec();
  const std::vector<double> bs = bias ? bias->into_data().to_f64_vec() : std::vector<double>();
  const std::int64_t m = x.shape()[0], k = x.shape()[1], n = w.shape()[1];
  const DType dtype = x.dtype();
  const double out_eps = dtype == DType::BF16  ? 0x1p-8
                         : dtype == DType::F16 ? 0x1p-11
                         : dtype == DType::F32 ? 0x1p-24
                                               : 0x1p-53;
  const double acc_eps = dtype == DType::F64 ? 0x1p-53 : 0x1p-24;
  ProductReference ref;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = bias ? bs[static_cast<std::size_t>(j)] : 0.0;
      double magnitude = std::abs(sum);
      for (std::int64_t l = 0; l < k; ++l) {
        const double term =
            xs[static_cast<std::size_t>(i * k + l)] * ws[static_cast<std::size_t>(l * n + j)];
        sum += term;
        magnitude += std::abs(term);
      }
      if (relu) sum = std::max(sum, 0.0);
      if (gelu) sum = 0.5 * sum * (1 + std::erf(sum / std::sqrt(2.0)));
      ref.value.push_back(sum);
      // Twice the rounding, in case the unfused device rounds between the product and the bias.
      ref.bound.push_back(1.2 * (2 * out_eps + double(k + 2) * acc_eps) * magnitude + 1e-300);
    }
  }
  return ref;
}

void expect_near_product(const Tensor<2>& got, const ProductReference& ref,
                         const std::string& what) {
  const std::vector<double> g = got.into_data().to_f64_vec();
  ASSERT_EQ(g.size(), ref.value.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i) {
    ASSERT_LE(std::abs(g[i] - ref.value[i]), ref.bound[i])
        << what << " at " << i << ": " << g[i] << " vs " << ref.value[i];
  }
}

}  // namespace gpu_fusion_test

TEST(GpuFusion, AProductWithItsBiasAndActivationIsOneCublasLtCall) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  auto& fusion = static_cast<fusion::FusionPassthrough&>(backend_for(device.fused()));
  const Device fused = device.fused();
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    const Tensor<2> x = random_on(device, {96, 70}, dtype, 51);
    const Tensor<2> w = random_on(device, {70, 130}, dtype, 52);
    const Tensor<2> b = random_on(device, {1, 130}, dtype, 53);
    const Tensor<1> b1 = b.reshape(Shape{130});
    const Tensor<2> fx = x.to_device(fused), fw = w.to_device(fused), fb = b.to_device(fused);
    const Tensor<1> fb1 = fb.reshape(Shape{130});
    struct Case {
      const char* what;
      std::function<Tensor<2>(const Tensor<2>&, const Tensor<2>&, const Tensor<2>&,
                              const Tensor<1>&)>
          run;
      bool bias, relu, gelu;
      std::size_t steps;
    };
    const Case cases[] = {
        {"relu(x @ w + b)",
         [](auto& x, auto& w, auto& b, auto&) { return activation::relu(x.matmul(w) + b); }, true,
         true, false, 3},
        {"gelu(b + x @ w)",
         [](auto& x, auto& w, auto& b, auto&) { return activation::gelu(b + x.matmul(w)); }, true,
         false, true, 3},
        {"relu(x @ w)",
         [](auto& x, auto& w, auto&, auto&) { return activation::relu(x.matmul(w)); }, false, true,
         false, 2},
        {"x @ w + b", [](auto& x, auto& w, auto& b, auto&) { return x.matmul(w) + b; }, true, false,
         false, 2},
        {"relu(linear(x, w, b))",
         [](auto& x, auto& w, auto&, auto& b1) {
           return activation::relu(module::linear(x, w.transpose(), std::optional(b1)));
         },
         true, true, false, 2},
        {"gelu(linear(x, w))",
         [](auto& x, auto& w, auto&, auto&) {
           return activation::gelu(module::linear(x, w.transpose()));
         },
         false, false, true, 2},
    };
    for (const Case& c : cases) {
      const std::string what = std::string(c.what) + " " + std::string(dtype_name(dtype));
      const ProductReference ref = product_reference(x, w, c.bias ? &b : nullptr, c.relu, c.gelu);
      expect_near_product(c.run(x, w, b, b1), ref, what + " unfused");
      std::vector<std::size_t> group_steps;
      fusion.set_result_hook_for_tests([&](const FusedProgram& program, std::vector<Primitive>&) {
        group_steps.push_back(program.steps.size());
      });
      // Twice: the second run is the group's plan.
      for (int run = 0; run < 2; ++run) {
        const Tensor<2> out = c.run(fx, fw, fb, fb1);
        const std::int64_t before = kernel_requests(device);
        expect_near_product(out, ref, what + " fused, run " + std::to_string(run));
        EXPECT_EQ(kernel_requests(device), before) << what << ": no generated kernel";
      }
      fusion.set_result_hook_for_tests(nullptr);
      EXPECT_EQ(group_steps, (std::vector<std::size_t>{c.steps, c.steps})) << what;
    }
  }
}

TEST(GpuFusion, AProductWhoseValueIsHeldOrReadAgainIsWrittenAndTheRestStillFuses) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  const Device fused = device.fused();
  const Tensor<2> x = random_on(device, {128, 128}, DType::F32, 61);
  const Tensor<2> w = random_on(device, {128, 128}, DType::F32, 62);
  const Tensor<2> b = random_on(device, {1, 128}, DType::F32, 63);
  const auto program = [&](const Device& on) {
    const Tensor<2> fx = x.to_device(on), fw = w.to_device(on), fb = b.to_device(on);
    // A product of a pending input of its own shape; its value held; read by two steps; then
    // the product again over a transposed view, and an integer product.
    const Tensor<2> in = (fx * 0.5).tanh();
    const Tensor<2> held = in.matmul(fw);
    const Tensor<2> out = activation::relu(held + fb) * held;
    const Tensor<2> again = activation::gelu(in.matmul(fw.transpose()) + fb);
    const Tensor<2, Int> ints = (fx * 10.0).int_();
    return std::vector<Tensor<2>>{held, out, again, ints.matmul(ints).float_()};
  };
  const std::vector<Tensor<2>> got = program(fused), want = program(device);
  for (std::size_t i = 0; i < got.size(); ++i) {
    expect_equal_values(got[i], want[i], "value " + std::to_string(i));
  }
}

// An update assigned to its parameter, as an optimizer does: the group's kernel writes the
// parameter itself (no new memory, no copy), equal to the unfused device; a group that reads the
// parameter through another view (its transpose) writes new memory first and stays right.
TEST(GpuFusion, AnAssignedUpdateWritesItsParameterInPlace) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  const Device fused = device.fused();
  const auto update = [](const Tensor<2>& p, const Tensor<2>& g) { return (p - g * 0.5) * 0.99; };
  for (const DType dtype : {DType::F32, DType::F16}) {
    const std::string what(dtype_name(dtype));
    Tensor<2> p = random_on(fused, {512, 1024}, dtype, 61);
    const Tensor<2> g = random_on(fused, {512, 1024}, dtype, 62);
    Tensor<2> plain = random_on(device, {512, 1024}, dtype, 61);
    const Tensor<2> alias = p;
    for (int step = 0; step < 3; ++step) {
      device.sync();
      device.reset_peak_memory();
      const std::int64_t base = device.memory_stats().bytes_in_use;
      p.assign(update(p, g));
      device.sync();
      const std::int64_t used = device.memory_stats().peak_bytes_in_use - base;
      EXPECT_LT(used, 512 * 1024 * std::int64_t(dtype_size(dtype))) << what << " step " << step;
      plain.assign(update(plain, g.to_device(device)));
      expect_equal_values(p, plain, what);
      expect_equal_values(alias, plain, what);
    }
  }
  Tensor<2> q = random_on(fused, {256, 256}, DType::F32, 63);
  const std::vector<double> before = q.into_data().to_f64_vec();
  q.assign(q - q.transpose() * 0.5);
  const std::vector<double> got = q.into_data().to_f64_vec();
  for (std::size_t r = 0; r < 256; ++r) {
    for (std::size_t c = 0; c < 256; ++c) {
      const double want = before[r * 256 + c] - 0.5 * before[c * 256 + r];
      ASSERT_NEAR(got[r * 256 + c], want, 1e-5 * (1 + std::abs(want))) << r << ", " << c;
    }
  }
}

// A product scaled and summed with a tensor of its shape (alpha · x·y + beta · c, an optimizer's
// W - lr · Xᵀ·dY) is one cuBLASLt call: no generated kernel, within the float64 reference's
// rounding bound; assigned to c's own parameter it is written there in place (no new memory),
// except where the product reads that parameter (then new memory, and the values stay right).
TEST(GpuFusion, AProductScaledAndSummedWithATensorIsOneCublasLtCall) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  const test::ScopedEnv product_sum("KILN_CUDA_PRODUCT_SUM", "1");  // off by default
  auto& fusion = static_cast<fusion::FusionPassthrough&>(backend_for(device.fused()));
  const Device fused = device.fused();
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    const Tensor<2> x = random_on(device, {96, 70}, dtype, 71);
    const Tensor<2> w = random_on(device, {70, 130}, dtype, 72);
    const Tensor<2> c = random_on(device, {96, 130}, dtype, 73);
    // An addend as a transposed view (made contiguous first).
    const Tensor<2> ct = random_on(device, {130, 96}, dtype, 74).transpose();
    const Tensor<2> fx = x.to_device(fused), fw = w.to_device(fused), fc = c.to_device(fused);
    const Tensor<2> fct = ct.to_device(fused);
    struct Case {
      const char* what;
      std::function<Tensor<2>(const Tensor<2>&, const Tensor<2>&, const Tensor<2>&)> run;
      double alpha, beta;
      std::size_t steps;
    };
    const Case cases[] = {
        {"c - x @ w * 0.25", [](auto& x, auto& w, auto& c) { return c - x.matmul(w) * 0.25; },
         -0.25, 1, 3},
        {"x @ w * 2 + c", [](auto& x, auto& w, auto& c) { return x.matmul(w) * 2.0 + c; }, 2, 1, 3},
        {"c + x @ w", [](auto& x, auto& w, auto& c) { return c + x.matmul(w); }, 1, 1, 2},
        {"x @ w - c", [](auto& x, auto& w, auto& c) { return x.matmul(w) - c; }, 1, -1, 2},
        {"x @ w * -3", [](auto& x, auto& w, auto&) { return x.matmul(w) * -3.0; }, -3, 0, 2},
    };
    const ProductReference product = product_reference(x, w, nullptr, false, false);
    const double out_eps = dtype == DType::BF16  ? 0x1p-8
                           : dtype == DType::F16 ? 0x1p-11
                           : dtype == DType::F32 ? 0x1p-24
                                                 : 0x1p-53;
    for (const Case& k : cases) {
      for (const bool view : {false, true}) {
        const std::vector<double> cs = (view ? ct : c).into_data().to_f64_vec();
        ProductReference ref;
        for (std::size_t i = 0; i < product.value.size(); ++i) {
          const double sum = k.alpha * product.value[i] + k.beta * cs[i];
          ref.value.push_back(sum);
          // The product's bound scaled, and a rounding of each term and of the sum (the unfused
          // device rounds after the product, the scale and the sum).
          ref.bound.push_back(std::abs(k.alpha) * 2 * product.bound[i] +
                              4 * out_eps *
                                  (std::abs(k.alpha * product.value[i]) + std::abs(k.beta * cs[i]) +
                                   std::abs(sum)));
        }
        const std::string what = std::string(k.what) + " " + std::string(dtype_name(dtype)) +
                                 (view ? " (c a transposed view)" : "");
        expect_near_product(k.run(x, w, view ? ct : c), ref, what + " unfused");
        std::vector<std::size_t> group_steps;
        fusion.set_result_hook_for_tests([&](const FusedProgram& program, std::vector<Primitive>&) {
          group_steps.push_back(program.steps.size());
        });
        for (int run = 0; run < 2; ++run) {  // the second run is the group's plan
          const Tensor<2> out = k.run(fx, fw, view ? fct : fc);
          const std::int64_t before = kernel_requests(device);
          expect_near_product(out, ref, what + " fused, run " + std::to_string(run));
          // None, but the copy that makes a transposed addend contiguous.
          EXPECT_LE(kernel_requests(device) - before, view ? 1 : 0) << what << ": a kernel";
        }
        fusion.set_result_hook_for_tests(nullptr);
        EXPECT_EQ(group_steps, (std::vector<std::size_t>{k.steps, k.steps})) << what;
      }
    }
  }

  // SGD's update of a weight in place: p -= lr · xᵀ·g, three steps, against float64 of the
  // values read back before each; an alias of p sees them; no memory of p's size is taken
  // (written at the call: the expression's temporaries give their handles up to the operators).
  for (DType dtype : {DType::F32, DType::BF16}) {
    const std::string what(dtype_name(dtype));
    const std::int64_t batch = 2048, in = 256, out = 384;  // a long k: split-k algorithms
    Tensor<2> p = random_on(fused, {in, out}, dtype, 81);
    const Tensor<2> alias = p;
    const Tensor<2> xs = random_on(fused, {batch, in}, dtype, 82);
    const Tensor<2> g = random_on(fused, {batch, out}, dtype, 83);
    const Tensor<2> xt = xs.transpose();
    const ProductReference step = product_reference(xs.to_device(device).transpose(),
                                                    g.to_device(device), nullptr, false, false);
    const double out_eps = dtype == DType::BF16 ? 0x1p-8 : 0x1p-24;
    for (int s = 0; s < 3; ++s) {
      const std::vector<double> before = p.into_data().to_f64_vec();
      device.sync();
      device.memory_cleanup();  // no cached block larger than a request (see the bias's update)
      device.reset_peak_memory();
      const std::int64_t base = device.memory_stats().bytes_in_use;
      p.assign(p - xt.matmul(g) * 0.01);
      device.sync();
      const std::int64_t used = device.memory_stats().peak_bytes_in_use - base;
      EXPECT_LT(used, in * out * std::int64_t(dtype_size(dtype))) << what << " step " << s;
      for (const Tensor<2>* t : {static_cast<const Tensor<2>*>(&p), &alias}) {
        const std::vector<double> got = t->into_data().to_f64_vec();
        for (std::size_t i = 0; i < got.size(); ++i) {
          const double want = before[i] - 0.01 * step.value[i];
          const double bound =
              0.02 * step.bound[i] + 4 * out_eps * (std::abs(before[i]) + std::abs(want));
          ASSERT_LE(std::abs(got[i] - want), bound) << what << " step " << s << " at " << i;
        }
      }
    }
  }

  // The product reads the parameter it is assigned to: not in place, and still right.
  Tensor<2> q = random_on(fused, {128, 128}, DType::F32, 84);
  const Tensor<2> qc = q.to_device(device);
  const ProductReference qq = product_reference(qc, qc, nullptr, false, false);
  const std::vector<double> q0 = qc.into_data().to_f64_vec();
  q.assign(q - q.matmul(q) * 0.5);
  const std::vector<double> got = q.into_data().to_f64_vec();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double want = q0[i] - 0.5 * qq.value[i];
    ASSERT_LE(std::abs(got[i] - want), qq.bound[i] + 1e-6 * (std::abs(want) + 1)) << i;
  }
}

// Elementwise ops on a reduction's result run in the reduction's own kernels (its epilogue),
// through a fusion decorator that groups them (test::EpilogueDecorator: the device's own
// decorator does only with KILN_CUDA_REDUCE_EPILOGUE=1): a bias's SGD update after its gradient's
// sum is one group and as many launches as the sum alone (one, or two when long lines are split
// and finished), within the float64 reference's rounding bound in every float dtype and equal to
// the unfused device's, its plan run again; along either dim, over a transposed view, with the
// epilogue reading another tensor broadcast, with the result itself still held, with integers;
// assigned to the bias it is written there in place (no memory for the update's result).
TEST(GpuFusion, AReductionsEpilogueRunsInItsKernels) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  Backend& cuda = backend_for(device);
  const auto launches_of = [&](auto run) {
    device.sync();
    const std::int64_t before = kernel_requests(device);
    run();
    device.sync();
    return kernel_requests(device) - before;
  };
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    const std::string type(dtype_name(dtype));
    const double eps = dtype == DType::BF16  ? 0x1p-8
                       : dtype == DType::F16 ? 0x1p-11
                       : dtype == DType::F32 ? 0x1p-24
                                             : 0x1p-53;
    // Short lines (one launch) and long ones (split, then finished).
    for (const std::int64_t rows : {128, 8192}) {
      test::EpilogueDecorator d(device);
      const std::int64_t cols = 96;
      const std::string what = type + " [" + std::to_string(rows) + ", 96]";
      const Primitive g = random_on(device, {rows, cols}, dtype, 91).primitive();
      const Primitive b = random_on(device, {1, cols}, dtype, 92).primitive();
      // float64: b - 0.01 * (column sums), with the sum's and the update's roundings as bound.
      const std::vector<double> gs = values_of(g), bs = values_of(b);
      std::vector<double> want(cols), bound(cols);
      for (std::int64_t j = 0; j < cols; ++j) {
        double sum = 0, magnitude = 0;
        for (std::int64_t i = 0; i < rows; ++i) {
          sum += gs[i * cols + j];
          magnitude += std::abs(gs[i * cols + j]);
        }
        want[j] = bs[j] - 0.01 * sum;
        bound[j] = 4 * eps * (0.01 * magnitude + std::abs(bs[j]) + std::abs(want[j]));
      }
      const std::int64_t alone = launches_of([&] { (void)values_of(cuda.sum_dim(g, 0)); });
      const Primitive unfused = cuda.sub(b, cuda.mul_scalar(cuda.sum_dim(g, 0), Scalar(0.01)));
      for (int run = 0; run < 2; ++run) {  // the second run is the group's plan
        Primitive out;
        const std::int64_t launches = launches_of([&] {
          out = d.b.sub(b, d.b.mul_scalar(d.b.sum_dim(g, 0), Scalar(0.01)));
          (void)d.read(out);
        });
        const std::string at = what + " run " + std::to_string(run);
        ASSERT_EQ(d.programs().size(), static_cast<std::size_t>(run + 1)) << at;
        EXPECT_EQ(test::ops_of(d.programs().back()),
                  (std::vector<std::string>{"sum_dim", "mul_scalar", "sub"}))
            << at;
        EXPECT_EQ(launches, alone) << at;
        const std::vector<double> got = d.read(out);
        for (std::int64_t j = 0; j < cols; ++j)
          ASSERT_LE(std::abs(got[j] - want[j]), bound[j]) << at << " at " << j;
        expect_same_as_unfused(d.fusion.computed(out), unfused, false, at + " against unfused");
      }
    }

    // Along dim 1 of a transposed view, then exp of a scaled result plus a broadcast [1, 1].
    {
      test::EpilogueDecorator d(device);
      const Primitive x = random_on(device, {300, 70}, dtype, 93).transpose().primitive();
      const Primitive c = random_on(device, {1, 1}, dtype, 94).primitive();
      const auto f = [&](Backend& on) {
        return on.add(on.exp(on.mul_scalar(on.mean_dim(x, 1), Scalar(0.5))), c);
      };
      Primitive out;
      const std::int64_t alone = launches_of([&] { (void)values_of(cuda.mean_dim(x, 1)); });
      const std::int64_t launches = launches_of([&] {
        out = f(d.b);
        (void)d.read(out);
      });
      ASSERT_EQ(d.programs().size(), 1u) << type;
      EXPECT_EQ(test::ops_of(d.programs()[0]),
                (std::vector<std::string>{"mean_dim", "mul_scalar", "exp", "add"}))
          << type;
      EXPECT_EQ(launches, alone) << type << " mean_dim(1)";
      expect_same_as_unfused(d.fusion.computed(out), f(cuda), false, type + " mean_dim(1)");
      Backend& cpu = backend_for(Device::cpu());
      const Primitive x64 = cpu.cast(test::on(x, Device::cpu()), DType::F64);
      const Primitive c64 = cpu.cast(test::on(c, Device::cpu()), DType::F64);
      expect_near_reference(
          d.fusion.computed(out),
          cpu.add(cpu.exp(cpu.mul_scalar(cpu.mean_dim(x64, 1), Scalar(0.5))), c64),
          type + " mean_dim(1)");
    }

    // The maximum still held after the group: written too, and equal bit for bit.
    {
      test::EpilogueDecorator d(device);
      const Primitive x = random_on(device, {64, 257}, dtype, 95).primitive();
      const Primitive m = d.b.max_dim(x, 1);
      const Primitive out = d.b.abs(d.b.sub_scalar(m, Scalar(1.0)));
      (void)d.read(out);
      ASSERT_EQ(d.programs().size(), 1u) << type;
      EXPECT_EQ(d.programs()[0].outputs.size(), 2u) << type << " the max held";
      expect_same_as_unfused(d.fusion.computed(m), cuda.max_dim(x, 1), true, type + " the max");
      expect_same_as_unfused(d.fusion.computed(out),
                             cuda.abs(cuda.sub_scalar(cuda.max_dim(x, 1), Scalar(1.0))), true,
                             type + " |max - 1|");
    }

    // SGD's update of a bias in place, three steps (the second and third the plan's): the group
    // is offered the bias and writes it (no memory for the update), within the float64 bound.
    {
      test::EpilogueDecorator d(device);
      const std::int64_t rows = 64, cols = 65536;
      const Primitive p =
          d.fusion.wrap_computed(random_on(device, {1, cols}, dtype, 96).primitive());
      const Primitive gr = random_on(device, {rows, cols}, dtype, 97).primitive();
      const std::vector<double> gs = values_of(gr);
      for (int s = 0; s < 3; ++s) {
        const std::vector<double> before = d.read(p);
        device.sync();
        // No cached blocks: a cached block serves a request down to half its size and counts
        // whole, so the sum's result could take the 2x block an f32 run left (bf16: 262144
        // bytes in use for a 131072-byte result, the bound below).
        device.memory_cleanup();
        device.reset_peak_memory();
        const std::int64_t base = device.memory_stats().bytes_in_use;
        d.b.assign(p, d.b.sub(p, d.b.mul_scalar(d.b.sum_dim(gr, 0), Scalar(0.125))));
        device.sync();
        const std::int64_t used = device.memory_stats().peak_bytes_in_use - base;
        const std::string at = type + " in place, step " + std::to_string(s);
        ASSERT_EQ(d.programs().size(), static_cast<std::size_t>(s + 1)) << at;
        ASSERT_EQ(d.programs().back().write_into.size(), 1u) << at;
        EXPECT_GE(d.programs().back().write_into[0], 0) << at << ": the bias not offered";
        // The sum's own result is written (the epilogue reads it back), the update is not.
        EXPECT_LT(used, 2 * cols * std::int64_t(dtype_size(dtype))) << at << ": new memory";
        const std::vector<double> got = d.read(p);
        for (std::int64_t j = 0; j < cols; ++j) {
          double sum = 0, magnitude = 0;
          for (std::int64_t i = 0; i < rows; ++i) {
            sum += gs[i * cols + j];
            magnitude += std::abs(gs[i * cols + j]);
          }
          const double want = before[j] - 0.125 * sum;
          ASSERT_LE(std::abs(got[j] - want),
                    4 * eps * (0.125 * magnitude + std::abs(before[j]) + std::abs(want)))
              << at << " at " << j;
        }
      }
    }
  }

  // Integers: a column sum times 3 plus a row, exact.
  {
    test::EpilogueDecorator d(device);
    const Primitive x = (random_on(device, {50, 40}, DType::F32, 98) * 50.0).int_().primitive();
    const Primitive c = (random_on(device, {1, 40}, DType::F32, 99) * 50.0).int_().primitive();
    const auto f = [&](Backend& on) {
      return on.add(on.mul_scalar(on.sum_dim(x, 0), Scalar(std::int64_t{3})), c);
    };
    const Primitive out = f(d.b);
    (void)d.read(out);
    ASSERT_EQ(d.programs().size(), 1u);
    EXPECT_EQ(test::ops_of(d.programs()[0]),
              (std::vector<std::string>{"sum_dim", "mul_scalar", "add"}));
    expect_same_as_unfused(d.fusion.computed(out), f(cuda), true, "ints sum_dim(0) * 3 + c");
  }
}
