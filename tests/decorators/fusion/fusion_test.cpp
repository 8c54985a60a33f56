// The fusion decorator's behaviour: ops are recorded and run when a value is needed, as few
// groups as the rules allow; errors still come at the call; held intermediates are written once;
// groups and the queue are bounded; memory stays flat and below the eager peak; devices and
// flags convert; autodiff over fusion gives the unfused gradients; a product heads its group, the
// bias and activation after it in the same group.
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "backends/cpu/cpu_tensor.h"
#include "contract/fused_program.h"
#include "decorators/fusion/fusion_backend.h"
#include "decorators/fusion/fusion_test_support.h"
#include "runtime/registry.h"
#include "support/error_message.h"
#include "support/spread.h"
#include "support/threads.h"

namespace kiln::fusion_test {
namespace {

Tensor<2> matrix(std::int64_t rows, std::int64_t cols, Device device, std::uint32_t seed = 1) {
  return Tensor<2>::from_data(
      TensorData::from_vec(test::spread(rows * cols, seed, -2.0, 2.0), Shape{rows, cols}), device);
}

std::vector<double> values(const Tensor<2>& t) { return t.into_data().to_f64_vec(); }

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "element " << i;
  }
}

// chain8 of the benchmarks: eight elementwise ops over three inputs.
Tensor<2> chain8(const Tensor<2>& x, const Tensor<2>& y, const Tensor<2>& z) {
  return ((((x * y + z).tanh() * 0.5 + x).exp() - y).abs() + 1.0).log();
}

TEST(Fusion, NamesItsChainAndDevice) {
  EXPECT_EQ(kFused.backend_name(), "fusion<cpu>");
  EXPECT_EQ(kFused.autodiff().backend_name(), "autodiff<fusion<cpu>>");
  const Tensor<2> x = matrix(2, 3, kFused);
  EXPECT_EQ(x.device(), kFused);
  EXPECT_EQ((x + x).device(), kFused);
}

TEST(Fusion, RecordsUntilAValueIsNeededThenRunsOneGroup) {
  const Tensor<2> x = matrix(300, 200, kFused, 1), y = matrix(300, 200, kFused, 2);
  const Tensor<2> z = matrix(300, 200, kFused, 3);
  const std::uint64_t before = groups();
  const Tensor<2> out = chain8(x, y, z);
  EXPECT_EQ(groups(), before) << "recording runs nothing";
  EXPECT_EQ(out.shape(), (Shape{300, 200})) << "shape known at the call";
  const std::vector<double> got = values(out);
  EXPECT_EQ(groups(), before + 1) << "the chain ran as one group";
  const std::vector<double> want = values(chain8(
      matrix(300, 200, kPlain, 1), matrix(300, 200, kPlain, 2), matrix(300, 200, kPlain, 3)));
  expect_near(got, want, 1e-6);
  values(out);
  EXPECT_EQ(groups(), before + 1) << "a computed value is not computed again";
}

TEST(Fusion, AHeldIntermediateIsWrittenByTheSameGroup) {
  const Tensor<2> x = matrix(100, 400, kFused);
  const std::uint64_t before = groups();
  const Tensor<2> a = x.exp();
  const Tensor<2> b = (a * 2.0).tanh();
  const std::vector<double> vb = values(b);
  const std::vector<double> va = values(a);
  EXPECT_EQ(groups(), before + 1) << "a was an output of b's group";
  expect_near(va, values(matrix(100, 400, kPlain).exp()), 1e-6);
  expect_near(vb, values((matrix(100, 400, kPlain).exp() * 2.0).tanh()), 1e-6);
}

// An op the decorator does not record (scatter) gets the inner tensor of a pending value whose
// last handle was given up, so the inner backend may write it in place; a value another handle
// still shows is copied and keeps its values.
TEST(Fusion, AnUnrecordedOpWritesAGivenUpValueInPlaceAndAHeldOneNot) {
  fusion::FusionPassthrough& f = fusion_backend();
  const Tensor<2> x = matrix(64, 300, kFused, 4);
  const Tensor<2, Int> where = Tensor<2, Int>::from_data(
      TensorData::from_vec(std::vector<std::int64_t>{5, 299, 0, 17}, Shape{4, 1}), kFused);
  const Tensor<2> put = matrix(4, 1, kFused, 5);
  const auto scattered = [&](Primitive base) {
    return f.scatter(1, std::move(base), where.primitive(), put.primitive(),
                     IndexingUpdate::Assign);
  };
  auto want = values(matrix(64, 300, kPlain, 4).exp());
  const std::vector<double> put_values = values(put);
  for (std::size_t r = 0; r < 4; ++r) {
    const std::int64_t column = std::vector<std::int64_t>{5, 299, 0, 17}[r];
    want[r * 300 + static_cast<std::size_t>(column)] = put_values[r];
  }
  // Given up: the group's output is the scatter's result, not a copy of it.
  Primitive temporary = x.exp().primitive();
  const void* storage = cpu::as_cpu(f.computed(temporary)).data();
  const Primitive result = scattered(std::move(temporary));
  EXPECT_EQ(cpu::as_cpu(f.computed(result)).data(), storage) << "copied, not written in place";
  expect_near(values(Tensor<2>::from_primitive(result)), want, 1e-6);
  // Held: the other handle still shows exp(x).
  const Tensor<2> held = x.exp();
  const Primitive copied = scattered(held.primitive());
  EXPECT_NE(cpu::as_cpu(f.computed(copied)).data(),
            cpu::as_cpu(f.computed(held.primitive())).data());
  expect_near(values(Tensor<2>::from_primitive(copied)), want, 1e-6);
  expect_near(values(held), values(matrix(64, 300, kPlain, 4).exp()), 1e-6);
}

TEST(Fusion, ABroadcastOperandMadeLazilyIsItsOwnGroup) {
  const Tensor<2> x = matrix(64, 1000, kFused, 4);
  const Tensor<2> bias = matrix(1, 1000, kFused, 5).sigmoid();
  const Tensor<2> out = activation::relu(x + bias);
  expect_near(
      values(out),
      values(activation::relu(matrix(64, 1000, kPlain, 4) + matrix(1, 1000, kPlain, 5).sigmoid())),
      1e-6);
}

TEST(Fusion, ReductionsAndSoftmaxAlongAnyDim) {
  for (std::int64_t dim : {0, 1}) {
    const Tensor<2> x = matrix(257, 300, kFused, 6);
    const Tensor<2> p = matrix(257, 300, kPlain, 6);
    expect_near(values(activation::softmax(x * 3.0, dim)),
                values(activation::softmax(p * 3.0, dim)), 1e-6);
    expect_near(values((x.exp() - 1.0).sum_dim(dim)), values((p.exp() - 1.0).sum_dim(dim)), 1e-5);
    expect_near(values((x * x).max_dim(dim)), values((p * p).max_dim(dim)), 0);
    // A reduction inside the group: the lines of a row tile are whole.
    expect_near(values(x - x.max_dim(dim)), values(p - p.max_dim(dim)), 0);
  }
}

TEST(Fusion, ElementwiseGroupsOverBroadcastLeavesAndIntegersEqualTheEagerOps) {
  // Groups of elementwise ops only (the CPU runs them piece by piece): a one-element operand read
  // by a binary op and by a vector-maths op; a row (a bias) and a column broadcast over the
  // group's shape; strided views; an integer chain whose kernels are the unsigned ones of its
  // width.
  const Tensor<2> x = matrix(300, 200, kFused, 11), one = matrix(1, 1, kFused, 12);
  const Tensor<2> px = matrix(300, 200, kPlain, 11), pone = matrix(1, 1, kPlain, 12);
  expect_near(values((x * one).exp() - one.exp() + x.tanh()),
              values((px * pone).exp() - pone.exp() + px.tanh()), 1e-6);
  const Tensor<2> bias = matrix(1, 200, kPlain, 14), column = matrix(300, 1, kPlain, 15);
  expect_near(values(activation::relu(x * 2.0 + bias) * column - bias),
              values(activation::relu(px * 2.0 + bias) * column - bias), 1e-6);
  // Strided leaves: a transposed view, and a slice whose rows are contiguous.
  const Tensor<2> t = matrix(200, 300, kFused, 16).transpose();
  const Tensor<2> pt = matrix(200, 300, kPlain, 16).transpose();
  const Tensor<2> wide = matrix(300, 260, kFused, 17).slice({Slice::all(), {30, 230}});
  const Tensor<2> pwide = matrix(300, 260, kPlain, 17).slice({Slice::all(), {30, 230}});
  expect_near(values((x * t).exp() + wide.tanh() * t), values((px * pt).exp() + pwide.tanh() * pt),
              1e-6);
  const auto ints = [](Device device) {
    const Tensor<2, Int> a = (matrix(300, 200, device, 13) * 1000.0).int_().cast(DType::I32);
    (void)a.into_data();  // computed, so that the group below is of arithmetic alone
    return ((a * 3 - a.abs()) * -7 + 11).into_data().to_f64_vec();
  };
  EXPECT_EQ(ints(kFused), ints(kPlain));
}

TEST(Fusion, AGroupWhoseOutputIsStreamedPastTheCachesEqualsTheEagerOps) {
  // 2050 x 4100 floats: an output past 32 MiB, streamed; a bias along the rows, so pieces stop
  // at each row's end (4100 = 16 pieces of 256 and one of 4) and the next row's start.
  const Tensor<2> x = matrix(2050, 4100, kFused, 21), y = matrix(2050, 4100, kFused, 22);
  const Tensor<2> bias = matrix(1, 4100, kFused, 23);
  const Tensor<2> px = matrix(2050, 4100, kPlain, 21), py = matrix(2050, 4100, kPlain, 22);
  const Tensor<2> pbias = matrix(1, 4100, kPlain, 23);
  const std::uint64_t before = groups();
  const std::vector<double> fused = values(chain8(x, y, bias) * x);
  EXPECT_EQ(groups(), before + 1);
  EXPECT_EQ(fused, values(chain8(px, py, pbias) * px));
}

TEST(Fusion, ComparisonsAndCastsInAGroupEqualTheEagerOpsAndFloat64) {
  // Comparisons with a tensor and a scalar, casts between widths and masks inside elementwise
  // groups (the CPU runs them piece by piece, on their own kernels); NaNs, equal values, integers
  // against a fractional scalar (compared in double) and integer equality (compared as bits).
  // Checked against loops in double over the same inputs and against the unfused device.
  const std::int64_t rows = 300, cols = 210;  // 63,000 positions: several pieces and threads
  const std::vector<double> xs = test::spread(rows * cols, 21, -2.0, 2.0);
  std::vector<double> ys = test::spread(rows * cols, 22, -2.0, 2.0);
  for (std::size_t i = 0; i < ys.size(); i += 7) ys[i] = xs[i];  // ties
  std::vector<double> xn = xs;
  for (std::size_t i = 0; i < xn.size(); i += 11) xn[i] = std::nan("");
  const auto input = [&](const std::vector<double>& v, Device device) {  // f32
    return Tensor<2>::from_data(
        TensorData::from_vec(std::vector<float>(v.begin(), v.end()), Shape{rows, cols}), device);
  };
  struct Got {
    std::vector<double> lower, greater_equal, not_equal_nan, cast_back, int_equal, int_fraction;
    std::vector<double> masked;  // mask_fill then mask_where with a broadcast row of values
  };
  const auto run = [&](Device device) {
    const Tensor<2> x = input(xs, device), y = input(ys, device), xnan = input(xn, device);
    Got g;
    g.lower = values((x * 2.0).lower(y * 2.0).float_());
    g.greater_equal = (x.exp() - 1.0).greater_equal_elem(0.25).into_data().to_f64_vec();
    g.not_equal_nan = (xnan + 1.0).not_equal(xnan + 1.0).into_data().to_f64_vec();
    // f32 -> f64 -> f32 through a group, then an f32 -> i32 cast truncating toward zero.
    g.cast_back = values(((x * 3.0).cast(DType::F64) + 0.5).cast(DType::F32));
    const Tensor<2, Int> a = (x * 100.0).int_().cast(DType::I32);
    const Tensor<2, Int> b = (y * 100.0).int_().cast(DType::I32);
    g.int_equal = (a * 2).equal(b * 2).into_data().to_f64_vec();
    g.int_fraction = (a + 1).greater_elem(2.5).into_data().to_f64_vec();
    const Tensor<2> row = Tensor<2>::from_data(
        TensorData::from_vec(std::vector<float>(xs.begin(), xs.begin() + cols), Shape{1, cols}),
        device);
    g.masked = values(
        ((x * 2.0).mask_fill(y.lower_elem(0.0), -1.0) + 1.0).mask_where(x.greater(y), row * 3.0) -
        0.5);
    return g;
  };
  const std::uint64_t before = groups();
  const Got fused = run(kFused);
  EXPECT_GT(groups(), before);
  const Got plain = run(kPlain);
  const auto f32 = [](double v) { return static_cast<double>(static_cast<float>(v)); };
  std::vector<double> lower, greater_equal, not_equal_nan, cast_back, int_equal, int_fraction;
  std::vector<double> masked;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double x = f32(xs[i]), y = f32(ys[i]);
    lower.push_back(f32(x * 2) < f32(y * 2) ? 1 : 0);
    greater_equal.push_back(f32(std::exp(x) - 1) >= 0.25 ? 1 : 0);
    not_equal_nan.push_back(std::isnan(xn[i]) ? 1 : 0);
    cast_back.push_back(f32(f32(x * 3) + 0.5));
    const auto a = static_cast<std::int32_t>(f32(x * 100)),
               b = static_cast<std::int32_t>(f32(y * 100));
    int_equal.push_back(a * 2 == b * 2 ? 1 : 0);
    int_fraction.push_back(a + 1 > 2.5 ? 1 : 0);
    const double filled = (y < 0 ? -1.0 : f32(x * 2)) + 1.0;
    masked.push_back(f32((x > y ? f32(f32(xs[i % cols]) * 3) : f32(filled)) - 0.5));
  }
  // exp's vector maths may round the last bit differently from std::exp: compare where the
  // reference is not within that of the threshold.
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (std::abs(f32(std::exp(f32(xs[i]))) - 1.25) < 1e-6)
      greater_equal[i] = fused.greater_equal[i];
  }
  EXPECT_EQ(fused.lower, lower);
  EXPECT_EQ(fused.greater_equal, greater_equal);
  EXPECT_EQ(fused.not_equal_nan, not_equal_nan);
  EXPECT_EQ(fused.cast_back, cast_back);
  EXPECT_EQ(fused.int_equal, int_equal);
  EXPECT_EQ(fused.int_fraction, int_fraction);
  EXPECT_EQ(fused.masked, masked);
  EXPECT_EQ(fused.masked, plain.masked);
  EXPECT_EQ(fused.lower, plain.lower);
  EXPECT_EQ(fused.greater_equal, plain.greater_equal);
  EXPECT_EQ(fused.cast_back, plain.cast_back);
  EXPECT_EQ(fused.int_equal, plain.int_equal);
  EXPECT_EQ(fused.int_fraction, plain.int_fraction);
}

TEST(Fusion, ErrorsComeAtTheCall) {
  const Tensor<2> a = matrix(2, 3, kFused), b = matrix(4, 5, kFused);
  const std::uint64_t before = groups();
  test::expect_error<ShapeMismatch>([&] { (void)(a.exp() + b); }, "add");
  EXPECT_EQ(groups(), before);
  test::expect_error<InvalidArgument>([&] { (void)a.exp().sum_dim(2); }, "sum_dim");
  EXPECT_EQ(groups(), before);
}

TEST(Fusion, AnOpThatFailsInAGroupIsAnExecutionErrorAtTheRead) {
  const Tensor<2, Int> a = Tensor<2, Int>::full({100, 100}, 7, kFused);
  Tensor<2, Int> b = Tensor<2, Int>::ones({100, 100}, kFused);
  b = (b * 2 - 2);                 // zeros, recorded
  const Tensor<2, Int> q = a / b;  // recorded: the division by zero is found when the group runs
  const std::string message = test::message_of<ExecutionError>([&] { (void)q.into_data(); });
  for (const char* part : {"[fusion]", "[div]", "integer division by zero", "div(v"}) {
    EXPECT_NE(message.find(part), std::string::npos) << part << " in: " << message;
  }
}

TEST(Fusion, ThreadsRecordAndReadAtOnce) {
  // A pending value shared by every thread, and each thread's own chain over it.
  const Tensor<2> shared = matrix(128, 256, kFused, 20).exp();
  const std::vector<double> want_shared = values(matrix(128, 256, kPlain, 20).exp());
  std::vector<std::vector<double>> got(4);
  test::run_together(4, [&](int id) {
    Tensor<2> x = matrix(128, 256, kFused, 21 + static_cast<std::uint32_t>(id));
    for (int step = 0; step < 20; ++step) x = (x * 0.5 + shared).tanh();
    got[static_cast<std::size_t>(id)] = values(x);
  });
  for (int id = 0; id < 4; ++id) {
    Tensor<2> p = matrix(128, 256, kPlain, 21 + static_cast<std::uint32_t>(id));
    const Tensor<2> s = matrix(128, 256, kPlain, 20).exp();
    for (int step = 0; step < 20; ++step) p = (p * 0.5 + s).tanh();
    expect_near(got[static_cast<std::size_t>(id)], values(p), 1e-6);
  }
  expect_near(values(shared), want_shared, 1e-6);
}

TEST(Fusion, GroupsAreBounded) {
  Tensor<2> x = matrix(64, 64, kFused);
  Tensor<2> p = matrix(64, 64, kPlain);
  const std::uint64_t before = groups();
  for (int i = 0; i < 200; ++i) {
    x = (x * 0.999 + 0.001).tanh();
    p = (p * 0.999 + 0.001).tanh();
  }
  EXPECT_GE(groups() - before, 400u / fusion::kMaxGroupOps - 1) << "long chains run in pieces";
  expect_near(values(x), values(p), 1e-6);
}

TEST(Fusion, TheQueueIsBounded) {
  // Pending values over a pending input (not computed, so recorded whatever their size).
  const Tensor<2> x = matrix(64, 64, kFused).exp();
  std::vector<Tensor<2>> held;
  const std::uint64_t before = groups();
  for (std::size_t i = 0; i < 3 * fusion::kMaxQueued; ++i)
    held.push_back(x * static_cast<double>(i));
  EXPECT_GT(groups(), before) << "held values were computed before any read";
  expect_near(values(held.back()),
              values(matrix(64, 64, kPlain).exp() * static_cast<double>(held.size() - 1)), 1e-6);
}

TEST(Fusion, SmallOpsOverComputedInputsRunAtOnce) {
  const Tensor<2> x = matrix(8, 8, kFused);
  const std::uint64_t before = groups();
  const Tensor<2> y = (x * 2.0).exp();
  EXPECT_EQ(groups(), before) << "nothing was recorded, so no group ran";
  EXPECT_EQ(y.device(), kFused);
  EXPECT_EQ(values(y), values((matrix(8, 8, kPlain) * 2.0).exp()));
  // A large input's pending chain still fuses with a small result of it.
  const Tensor<2> big = matrix(300, 200, kFused);
  const Tensor<2> rows = big.exp().sum_dim(1);
  EXPECT_EQ(groups(), before);
  expect_near(values(rows), values(matrix(300, 200, kPlain).exp().sum_dim(1)), 1e-6);
  EXPECT_EQ(groups(), before + 1);
}

TEST(Fusion, ForwardLoopsStayFlatAndBelowTheEagerPeak) {
  const Tensor<2> x = matrix(512, 512, kFused, 7), y = matrix(512, 512, kFused, 8);
  const Tensor<2> z = matrix(512, 512, kFused, 9);
  const Tensor<2> px = matrix(512, 512, kPlain, 7), py = matrix(512, 512, kPlain, 8);
  const Tensor<2> pz = matrix(512, 512, kPlain, 9);
  // The CPU device's allocator is shared by both chains: peaks are measured one after the other.
  values(chain8(px, py, pz));
  kPlain.reset_peak_memory();
  const std::int64_t base = kPlain.memory_stats().bytes_in_use;
  values(chain8(px, py, pz));
  const std::int64_t eager_peak = kPlain.memory_stats().peak_bytes_in_use - base;
  kPlain.reset_peak_memory();
  values(chain8(x, y, z));
  const std::int64_t fused_peak = kPlain.memory_stats().peak_bytes_in_use - base;
  // No intermediate of the chain is written out; each thread holds a few tiles' values
  // (8192 elements) in the allocator while it runs: at most 64 KiB per thread per live value.
  const std::int64_t scratch = std::int64_t{omp_get_max_threads()} * 8 * 65536;
  EXPECT_LE(fused_peak, eager_peak + scratch);
  const Device ad = kFused.autodiff();
  const Tensor<2> w = matrix(512, 512, ad, 10).require_grad();
  std::int64_t first = 0;
  for (int i = 0; i < 50; ++i) {
    Tensor<1> loss = ((w * 2.0 + 1.0).tanh() * w).sum();
    (void)loss.into_data();
    if (i == 5) first = kPlain.memory_stats().bytes_in_use;
  }
  EXPECT_LE(kPlain.memory_stats().bytes_in_use, first);
}

TEST(Fusion, ConvertsBetweenFlagsAndMixesWithPlainTensors) {
  const Tensor<2> p = matrix(3, 4, kPlain);
  const Tensor<2> f = p.to_device(kFused);
  EXPECT_EQ(f.device(), kFused);
  EXPECT_EQ(values(f), values(p));
  const Tensor<2> back = (f * 2.0).to_device(kPlain);
  EXPECT_EQ(back.device(), kPlain);
  EXPECT_EQ(values(back), values(p * 2.0));
  const Tensor<2> tracked = (f + 1.0).to_device(kFused.autodiff());
  EXPECT_EQ(tracked.device(), kFused.autodiff());
  EXPECT_EQ(tracked.to_device(kPlain).device(), kPlain);
  EXPECT_EQ(values(tracked.to_device(kPlain.autodiff())), values(p + 1.0));
  // A plain operand joins a fused one as a constant.
  const Tensor<2> mixed = f + p;
  EXPECT_EQ(mixed.device(), kFused);
  EXPECT_EQ(values(mixed), values(p + p));
}

TEST(Fusion, AutodiffOverFusionGivesTheUnfusedGradients) {
  auto grad = [](Device device) {
    const Tensor<2> w = matrix(64, 300, device, 11).require_grad();
    const Tensor<2> x = matrix(64, 300, device, 12);
    const Tensor<1> loss = activation::log_softmax((w * x).tanh() + w, 1).mean();
    return values(*w.grad(loss.backward()));
  };
  expect_near(grad(kFused.autodiff()), grad(kPlain.autodiff()), 1e-6);
}

// act(x · w + bias) in float64 loops, x [m, k], w [k, n], bias [1, n].
std::vector<double> product_reference(const Tensor<2>& x, const Tensor<2>& w, const Tensor<2>& bias,
                                      bool gelu) {
  const std::vector<double> xs = values(x), ws = values(w), bs = values(bias);
  const std::int64_t m = x.shape()[0], k = x.shape()[1], n = w.shape()[1];
  std::vector<double> out;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = bs[static_cast<std::size_t>(j)];
      for (std::int64_t l = 0; l < k; ++l) {
        sum += xs[static_cast<std::size_t>(i * k + l)] * ws[static_cast<std::size_t>(l * n + j)];
      }
      out.push_back(gelu ? 0.5 * sum * (1 + std::erf(sum / std::sqrt(2.0))) : std::max(sum, 0.0));
    }
  }
  return out;
}

TEST(Fusion, AProductHeadsItsGroupWithTheBiasAndActivationAfterIt) {
  const Tensor<2> x = matrix(300, 64, kFused, 21), w = matrix(64, 200, kFused, 22);
  const Tensor<2> b = matrix(1, 200, kFused, 23);
  const std::uint64_t before = groups();
  const Tensor<2> out = activation::relu(x.matmul(w) + b);
  EXPECT_EQ(groups(), before) << "the product is recorded too";
  const std::vector<double> got = values(out);
  EXPECT_EQ(groups(), before + 1) << "product, bias and relu are one group";
  expect_near(got, product_reference(x, w, b, false), 1e-5);
  const Tensor<1> b1 = b.reshape(Shape{200});
  expect_near(values(activation::gelu(module::linear(x, w.transpose(), std::optional(b1)))),
              product_reference(x, w, b, true), 1e-5);
}

TEST(Fusion, TheOpsAfterAProductWriteIntoItsMemory) {
  // relu(x @ w + b): eager, the add writes a second [512, 1024] buffer; fused, the group's output
  // takes the product's memory (only the group holds it), so the peak is one buffer and the
  // threads' piece buffers.
  const auto peak = [](Device device) {
    const Tensor<2> x = matrix(512, 256, device, 41), w = matrix(256, 1024, device, 42);
    const Tensor<2> b = matrix(1, 1024, device, 43);
    (void)values(x), (void)values(w), (void)values(b);
    kPlain.reset_peak_memory();
    const std::int64_t base = kPlain.memory_stats().bytes_in_use;
    const Tensor<2> out = activation::relu(x.matmul(w) + b);
    const std::vector<double> got = values(out);
    const std::int64_t used = kPlain.memory_stats().peak_bytes_in_use - base;
    expect_near(got, product_reference(x, w, b, false), 1e-5);
    return used;
  };
  const std::int64_t buffer = 512 * 1024 * 8;  // matrix() makes f64 tensors
  const std::int64_t scratch = std::int64_t{omp_get_max_threads()} * 8 * 65536;
  const std::int64_t eager = peak(kPlain), fused = peak(kFused);
  EXPECT_GE(eager, 2 * buffer);
  EXPECT_LE(fused, buffer + scratch);
  // A product held by a handle keeps its value: the group's output goes elsewhere.
  const Tensor<2> x = matrix(300, 64, kFused, 44), w = matrix(64, 200, kFused, 45);
  const Tensor<2> product = x.matmul(w);
  const Tensor<2> out = activation::relu(product + 1.0);
  const std::vector<double> p = values(product), o = values(out);
  const std::vector<double> want =
      values(matrix(300, 64, kPlain, 44).matmul(matrix(64, 200, kPlain, 45)));
  expect_near(p, want, 1e-6);
  for (std::size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], std::max(want[i] + 1.0, 0.0), 1e-5);
}

// An update assigned to its parameter, as an optimizer does: the group writes the parameter's
// own memory, allocating nothing (eager, a new buffer and a copy). A temporary of the expression
// still alive in the statement (g * 0.5 in p.assign(p - g * 0.5)) is written once, by the same
// group.
TEST(Fusion, AnAssignedGroupWritesIntoItsDestination) {
  const std::int64_t buffer = 512 * 1024 * 8;
  const std::int64_t scratch = std::int64_t{omp_get_max_threads()} * 8 * 65536;
  const auto update = [](const Tensor<2>& p, const Tensor<2>& g) { return p - g * 0.5; };
  for (const Device device : {kPlain, kFused}) {
    SCOPED_TRACE(device.to_string());
    for (const bool temporary : {false, true}) {
      Tensor<2> p = matrix(512, 1024, device, 51);
      const Tensor<2> g = matrix(512, 1024, device, 52);
      const Tensor<2> alias = p;
      const std::vector<double> before = values(p), grad = values(g);
      kPlain.reset_peak_memory();
      const std::int64_t base = kPlain.memory_stats().bytes_in_use;
      if (temporary) {
        p.assign(p - g * 0.5);
      } else {
        p.assign(update(p, g));
      }
      const std::int64_t used = kPlain.memory_stats().peak_bytes_in_use - base;
      if (device == kPlain) {
        EXPECT_GE(used, buffer);
      } else {
        EXPECT_LE(used, (temporary ? buffer : 0) + scratch) << "temporary " << temporary;
      }
      std::vector<double> want(before.size());
      for (std::size_t i = 0; i < want.size(); ++i) want[i] = before[i] - grad[i] * 0.5;
      expect_near(values(p), want, 1e-15);
      expect_near(values(alias), want, 1e-15);
    }
  }
  // A source another handle shows keeps its own memory: assigning p again leaves it as it was.
  Tensor<2> p = matrix(512, 1024, kFused, 53);
  const Tensor<2> g = matrix(512, 1024, kFused, 54);
  Tensor<2> moved = p - g;
  const Tensor<2> held = moved;
  p.assign(std::move(moved));  // another handle shows it: new memory, then a copy
  const std::vector<double> kept = values(held);
  p.assign(p * 2.0);
  expect_near(values(held), kept, 0);
  expect_near(
      values(p),
      [&] {
        std::vector<double> twice = kept;
        for (double& v : twice) v *= 2;
        return twice;
      }(),
      0);
}

// A gradient still pending as a product (the last layer's weight gradient) heads the update's
// group: the product runs whole into memory of its own, the steps after it into the parameter;
// a product reading the parameter itself has read it before anything is written there.
TEST(Fusion, AnAssignedGroupHeadedByAProductWritesIntoItsDestination) {
  const std::int64_t scratch = std::int64_t{omp_get_max_threads()} * 8 * 65536;
  Tensor<2> p = matrix(256, 512, kFused, 71);
  const Tensor<2> a = matrix(256, 64, kFused, 72), b = matrix(64, 512, kFused, 73);
  const std::vector<double> before = values(p), av = values(a), bv = values(b);
  const auto update = [](const Tensor<2>& p, const Tensor<2>& a, const Tensor<2>& b) {
    return p - a.matmul(b) * 0.5;
  };
  kPlain.reset_peak_memory();
  const std::int64_t base = kPlain.memory_stats().bytes_in_use;
  p.assign(update(p, a, b));
  EXPECT_LE(kPlain.memory_stats().peak_bytes_in_use - base, 256 * 512 * 8 + scratch);
  std::vector<double> want(before.size());
  for (std::size_t r = 0; r < 256; ++r) {
    for (std::size_t c = 0; c < 512; ++c) {
      double dot = 0;
      for (std::size_t k = 0; k < 64; ++k) dot += av[r * 64 + k] * bv[k * 512 + c];
      want[r * 512 + c] = before[r * 512 + c] - 0.5 * dot;
    }
  }
  expect_near(values(p), want, 1e-12);
  Tensor<2> q = matrix(128, 128, kFused, 74);
  const Tensor<2> m = matrix(128, 128, kFused, 75);
  const std::vector<double> qv = values(q), mv = values(m);
  q.assign([&] { return q.matmul(m) + q; }());
  std::vector<double> qwant(qv.size());
  for (std::size_t r = 0; r < 128; ++r) {
    for (std::size_t c = 0; c < 128; ++c) {
      double dot = 0;
      for (std::size_t k = 0; k < 128; ++k) dot += qv[r * 128 + k] * mv[k * 128 + c];
      qwant[r * 128 + c] = dot + qv[r * 128 + c];
    }
  }
  expect_near(values(q), qwant, 1e-12);
}

// An update that is a product, its scale and its sum with the parameter it is assigned to (SGD's
// w.assign(w - xᵀ·dy * lr), autodiff's weight gradient still pending as the product) is one BLAS
// call into the parameter (c = alpha a·b + beta c): no memory for the product, the values within
// float64's rounding bound, in f32 and f64 and in each form (add, sub on either side, no scale);
// not where the product reads the parameter, nor with a zero scale (the NaN of an infinite term
// survives, as unfused).
TEST(Fusion, AnUpdateInItsGradientsProductIsOneBlasCallIntoTheParameter) {
  const auto made = [](std::int64_t rows, std::int64_t cols, std::uint32_t seed, DType dtype) {
    const std::vector<double> v = test::spread(rows * cols, seed, -2.0, 2.0);
    if (dtype == DType::F64) {
      return Tensor<2>::from_data(TensorData::from_vec(v, Shape{rows, cols}), kFused);
    }
    return Tensor<2>::from_data(
        TensorData::from_vec(std::vector<float>(v.begin(), v.end()), Shape{rows, cols}), kFused);
  };
  struct Form {
    const char* what;
    // (p, x, dy), the product xᵀ·dy made inside: a handle outside would make it written out.
    std::function<Tensor<2>(const Tensor<2>&, const Tensor<2>&, const Tensor<2>&)> run;
    double alpha, beta;
  };
  const Form forms[] = {
      {"p - g * 0.01",
       [](auto& p, auto& x, auto& dy) { return p - x.transpose().matmul(dy) * 0.01; }, -0.01, 1},
      {"g * 2 + p", [](auto& p, auto& x, auto& dy) { return x.transpose().matmul(dy) * 2.0 + p; },
       2, 1},
      {"p + g", [](auto& p, auto& x, auto& dy) { return p + x.transpose().matmul(dy); }, 1, 1},
      {"g - p", [](auto& p, auto& x, auto& dy) { return x.transpose().matmul(dy) - p; }, 1, -1},
  };
  for (const DType dtype : {DType::F32, DType::F64}) {
    const double eps = dtype == DType::F32 ? 0x1p-24 : 0x1p-53;
    for (const Form& form : forms) {
      const std::string what = std::string(form.what) + " " + std::string(dtype_name(dtype));
      Tensor<2> p = made(200, 300, 81, dtype);
      const Tensor<2> alias = p;
      const Tensor<2> x = made(96, 200, 82, dtype), dy = made(96, 300, 83, dtype);
      const std::vector<double> pv = values(p), xv = values(x), dv = values(dy);
      kPlain.reset_peak_memory();
      const std::int64_t base = kPlain.memory_stats().bytes_in_use;
      p.assign(form.run(p, x, dy));
      EXPECT_LT(kPlain.memory_stats().peak_bytes_in_use - base,
                200 * 300 * std::int64_t(dtype_size(dtype)) / 2)
          << what << ": the product took memory of its own";
      const std::vector<double> got = values(p), seen = values(alias);
      for (std::size_t r = 0; r < 200; ++r) {
        for (std::size_t c = 0; c < 300; ++c) {
          double dot = 0, magnitude = 0;
          for (std::size_t k = 0; k < 96; ++k) {
            dot += xv[k * 200 + r] * dv[k * 300 + c];
            magnitude += std::abs(xv[k * 200 + r] * dv[k * 300 + c]);
          }
          const std::size_t i = r * 300 + c;
          const double want = form.alpha * dot + form.beta * pv[i];
          const double bound = eps * (100 * std::abs(form.alpha) * magnitude + 4 * std::abs(pv[i]) +
                                      4 * std::abs(want));
          ASSERT_NEAR(got[i], want, bound) << what << " at " << r << ", " << c;
          ASSERT_EQ(seen[i], got[i]) << what << ": the parameter's other handle";
        }
      }
    }
  }
  // Written at the call, the expression's temporaries give their handles up to the ops that read
  // them (the operators' rvalue forms): no memory for the product there either, and the values
  // of the form made inside a function, bit for bit.
  {
    Tensor<2> p = made(200, 300, 87, DType::F32), q = made(200, 300, 87, DType::F32);
    const Tensor<2> x = made(96, 200, 88, DType::F32), dy = made(96, 300, 89, DType::F32);
    (void)values(p);
    (void)values(q);
    kPlain.reset_peak_memory();
    const std::int64_t base = kPlain.memory_stats().bytes_in_use;
    p.assign(p - x.transpose().matmul(dy) * 0.01);
    EXPECT_LT(kPlain.memory_stats().peak_bytes_in_use - base, 200 * 300 * 4 / 2)
        << "at the call: the product took memory of its own";
    q.assign(forms[0].run(q, x, dy));
    EXPECT_EQ(values(p), values(q));
  }
  // A zero scale keeps the product's NaN (an infinite term times zero), as the ops one by one do.
  Tensor<2> p = made(64, 128, 84, DType::F32);
  std::vector<double> with_inf = test::spread(64 * 64, 85, 0.5, 1.0);
  with_inf[3] = std::numeric_limits<double>::infinity();  // row 0
  const Tensor<2> a = Tensor<2>::from_data(
      TensorData::from_vec(std::vector<float>(with_inf.begin(), with_inf.end()), Shape{64, 64}),
      kFused);
  const Tensor<2> b = made(64, 128, 86, DType::F32).abs() + 0.5;  // no zero times the infinity
  p.assign(p - a.matmul(b) * 0.0);
  const std::vector<double> zero_scaled = values(p);
  for (std::size_t c = 0; c < 128; ++c) ASSERT_TRUE(std::isnan(zero_scaled[c])) << c;
  for (std::size_t i = 128; i < zero_scaled.size(); ++i) ASSERT_FALSE(std::isnan(zero_scaled[i]));
}

// A group that reads its destination through another view (its transpose, a broadcast row of
// it) would read elements it has already written: such a group writes new memory and copies.
TEST(Fusion, AnAssignedGroupReadingItsDestinationThroughAnotherViewIsRight) {
  Tensor<2> q = matrix(300, 300, kFused, 55);
  const std::vector<double> before = values(q);
  q.assign(q - q.transpose() * 0.5);
  std::vector<double> want(before.size());
  for (std::size_t r = 0; r < 300; ++r) {
    for (std::size_t c = 0; c < 300; ++c)
      want[r * 300 + c] = before[r * 300 + c] - 0.5 * before[c * 300 + r];
  }
  expect_near(values(q), want, 1e-15);
  Tensor<2> m = matrix(64, 300, kFused, 56);
  const std::vector<double> rows = values(m);
  m.assign(m * 3.0 - m.slice({Slice(5, 6), Slice()}).expand({64, 300}));
  for (std::size_t r = 0; r < 64; ++r) {
    for (std::size_t c = 0; c < 300; ++c)
      want[r * 300 + c] = rows[r * 300 + c] * 3.0 - rows[5 * 300 + c];
  }
  want.resize(64 * 300);
  expect_near(values(m), want, 1e-15);
  // And under the checker, which runs every group twice, the destination is written once.
  {
    fusion_backend().set_check(true);
    Tensor<2> p = matrix(512, 256, kFused, 57);
    const std::vector<double> old = values(p);
    p.assign((p * 2.0).exp() * 0.25);
    fusion_backend().set_check(false);
    std::vector<double> checked(old.size());
    for (std::size_t i = 0; i < old.size(); ++i) checked[i] = std::exp(old[i] * 2.0) * 0.25;
    expect_near(values(p), checked, 1e-14);
  }
}

TEST(Fusion, ProductsInGroupsEqualTheUnfusedDevice) {
  // A held product read by two steps; a product of a pending input of its own shape; a batched
  // left operand and a transposed right one; linear without a bias; integers.
  const auto program = [](Device on) {
    const Tensor<2> x = matrix(200, 200, on, 24), w = matrix(200, 200, on, 25);
    const Tensor<2> b = matrix(1, 200, on, 26);
    const Tensor<2> held = (x * 0.5).tanh().matmul(w);
    const Tensor<2> out = activation::relu(held + b) * held;
    const Tensor<3> batched = Tensor<3>::from_data(
        TensorData::from_vec(test::spread(3 * 50 * 200, 27, -1.0, 1.0), Shape{3, 50, 200}), on);
    const Tensor<3> bout =
        activation::gelu(batched.matmul(w.transpose().unsqueeze(0)) + b.unsqueeze(0));
    const Tensor<2> lin = activation::relu(module::linear(x, w.transpose())) - 1.0;
    const Tensor<2, Int> ints = (x * 10.0).int_();
    std::vector<std::vector<double>> all = {values(held), values(out), values(lin),
                                            values(ints.matmul(ints).float_() * 0.5)};
    all.push_back(bout.into_data().to_f64_vec());
    return all;
  };
  const auto got = program(kFused), want = program(kPlain);
  for (std::size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE("value " + std::to_string(i));
    expect_near(got[i], want[i], 1e-5);
  }
}

TEST(Fusion, AutodiffOverFusedProductsGivesTheUnfusedGradients) {
  auto grads = [](Device device) {
    const Tensor<2> w1 = matrix(40, 300, device, 31).require_grad();
    const Tensor<2> b1 = matrix(1, 300, device, 32).require_grad();
    const Tensor<2> w2 = matrix(300, 10, device, 33).require_grad();
    const Tensor<2> x = matrix(128, 40, device, 34);
    const Tensor<2> h = activation::relu(x.matmul(w1) + b1);
    const Tensor<1> loss = activation::log_softmax(h.matmul(w2), 1).mean();
    const Gradients g = loss.backward();
    std::vector<double> all = values(*w1.grad(g));
    for (const Tensor<2>* p : {&b1, &w2}) {
      const std::vector<double> v = values(*p->grad(g));
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  expect_near(grads(kFused.autodiff()), grads(kPlain.autodiff()), 1e-5);
}

// Turns the checker on for one test, with a hook on the fused results; both off again after.
class Checked {
 public:
  explicit Checked(fusion::FusionPassthrough::ResultHook hook = nullptr) {
    fusion_backend().set_check(true);
    fusion_backend().set_result_hook_for_tests(std::move(hook));
  }
  ~Checked() {
    fusion_backend().set_check(false);
    fusion_backend().set_result_hook_for_tests(nullptr);
  }
  Checked(const Checked&) = delete;
  Checked& operator=(const Checked&) = delete;
};

TEST(FusionCheck, PassesWhenTheGroupIsRight) {
  const Checked checked;
  const Tensor<2> x = matrix(300, 200, kFused, 1), y = matrix(300, 200, kFused, 2);
  expect_near(values(chain8(x, y, x)),
              values(chain8(matrix(300, 200, kPlain, 1), matrix(300, 200, kPlain, 2),
                            matrix(300, 200, kPlain, 1))),
              1e-6);
  expect_near(
      values(activation::softmax(x * y, 1)),
      values(activation::softmax(matrix(300, 200, kPlain, 1) * matrix(300, 200, kPlain, 2), 1)),
      1e-6);
}

TEST(FusionCheck, NamesTheGroupWhoseResultIsWrong) {
  // The fault: one element of the group's last output off by one.
  const Checked checked([](const FusedProgram&, std::vector<Primitive>& results) {
    Backend& cpu = backend_for(kPlain);
    TensorData data = cpu.into_data(results[0]).get();
    std::vector<double> v = data.to_f64_vec();
    v[7] += 1.0;
    results[0] = cpu.from_data(TensorData::from_vec(v, data.shape()).convert(data.dtype()), kPlain);
  });
  const Tensor<2> x = matrix(300, 200, kFused, 1);
  const Tensor<2> out = (x.exp() * 3.0).tanh();
  const std::string message = test::message_of<FusionMismatch>([&] { (void)out.into_data(); });
  for (const char* part :
       {"[fusion]", "differs at element 7", "exp(v0)", "mul_scalar(v1)", "tanh(v2)", "(written)"}) {
    EXPECT_NE(message.find(part), std::string::npos) << part << " in: " << message;
  }
}

TEST(FusionCheck, TheStructureHashIgnoresSizesButNotOps) {
  std::vector<std::uint64_t> hashes;
  fusion_backend().set_result_hook_for_tests(
      [&](const FusedProgram& program, std::vector<Primitive>&) {
        hashes.push_back(structure_hash(program));
      });
  values((matrix(300, 200, kFused).exp() * 2.0).tanh());
  values((matrix(70, 900, kFused).exp() * 5.0).tanh());
  values((matrix(70, 900, kFused).exp() * 5.0).sin());
  fusion_backend().set_result_hook_for_tests(nullptr);
  ASSERT_EQ(hashes.size(), 3u);
  EXPECT_EQ(hashes[0], hashes[1]);
  EXPECT_NE(hashes[1], hashes[2]);
}

TEST(FusionCheck, AValueReadByManyStepsIsOneLeaf) {
  // x is computed (made from data), c is a constant of the unfused device, s ran at once (small):
  // each is read by several recorded ops and becomes one leaf of their group.
  std::vector<std::int32_t> leaves;
  fusion_backend().set_result_hook_for_tests(
      [&](const FusedProgram& program, std::vector<Primitive>&) {
        leaves.push_back(program.leaf_count());
      });
  const Tensor<2> x = matrix(300, 200, kFused, 1);
  const Tensor<2> c = matrix(300, 200, kPlain, 2);
  const Tensor<2> s = matrix(1, 200, kFused, 3) * 2.0;
  const Tensor<2> out = ((x * x + c).exp() * c + x - s) * s;
  const std::vector<double> got = values(out);
  fusion_backend().set_result_hook_for_tests(nullptr);
  EXPECT_EQ(leaves, std::vector<std::int32_t>{3});
  const Tensor<2> px = matrix(300, 200, kPlain, 1);
  const Tensor<2> ps = matrix(1, 200, kPlain, 3) * 2.0;
  expect_near(got, values(((px * px + c).exp() * c + px - ps) * ps), 1e-6);
}

// Sets the group controls for one test, counting the groups that run fused (the result hook sees
// only those); the environment's controls and no hook again after.
class Controlled {
 public:
  explicit Controlled(const fusion::GroupControls& controls) {
    fusion_backend().set_group_controls_for_tests(controls);
    fusion_backend().set_result_hook_for_tests(
        [this](const FusedProgram&, std::vector<Primitive>&) { ++fused; });
  }
  ~Controlled() {
    fusion_backend().set_group_controls_for_tests(fusion::GroupControls::from_environment());
    fusion_backend().set_result_hook_for_tests(nullptr);
  }
  Controlled(const Controlled&) = delete;
  Controlled& operator=(const Controlled&) = delete;
  int fused = 0;
};

// Four groups, one per read, each checked against the plain device's result.
void four_groups() {
  Tensor<2> x = matrix(100, 300, kFused, 7);
  Tensor<2> p = matrix(100, 300, kPlain, 7);
  for (int step = 0; step < 4; ++step) {
    x = (x * 0.5).tanh() + 0.25;
    p = (p * 0.5).tanh() + 0.25;
    expect_near(values(x), values(p), 1e-6);
  }
}

TEST(FusionControls, GroupsFromTheLimitOnRunStepByStep) {
  const std::uint64_t first = fusion::groups_numbered();
  fusion::GroupControls controls;
  controls.limit = first + 2;
  const Controlled controlled(controls);
  four_groups();
  EXPECT_EQ(fusion::groups_numbered(), first + 4) << "every group is numbered";
  EXPECT_EQ(controlled.fused, 2) << "groups " << first << " and " << first + 1 << " only";
}

TEST(FusionControls, OnlyOneGroupRunsFused) {
  const std::uint64_t first = fusion::groups_numbered();
  fusion::GroupControls controls;
  controls.only = first + 2;
  const Controlled controlled(controls);
  four_groups();
  EXPECT_EQ(controlled.fused, 1);
}

TEST(FusionControls, TheFaultForTestsChangesItsGroupWhenFused) {
  fusion::GroupControls controls;
  controls.fault = fusion::groups_numbered();
  {
    const Controlled controlled(controls);
    const std::vector<double> got = values((matrix(100, 300, kFused).exp() * 3.0).tanh());
    std::vector<double> want = values((matrix(100, 300, kPlain).exp() * 3.0).tanh());
    want[0] += 1.0;
    expect_near(got, want, 1e-6);
  }
  // Step by step (past the limit), the group is not a fused kernel: no fault.
  controls.fault = fusion::groups_numbered();
  controls.limit = *controls.fault;
  const Controlled controlled(controls);
  expect_near(values((matrix(100, 300, kFused).exp() * 3.0).tanh()),
              values((matrix(100, 300, kPlain).exp() * 3.0).tanh()), 1e-6);
  EXPECT_EQ(controlled.fused, 0);
}

TEST(FusionControls, DescribesItsGroupOnStderr) {
  fusion::GroupControls controls;
  controls.describe = fusion::groups_numbered() + 1;
  const Controlled controlled(controls);
  testing::internal::CaptureStderr();
  four_groups();
  const std::string printed = testing::internal::GetCapturedStderr();
  const std::string header =
      "kiln fusion: group #" + std::to_string(*controls.describe) + " (structure hash ";
  for (const std::string& part :
       {header, std::string("run fused):\nv0 = leaf f64 [100, 300]\n"), std::string("tanh(v"),
        "kiln fusion: end of group #" + std::to_string(*controls.describe) + "\n"}) {
    EXPECT_NE(printed.find(part), std::string::npos) << part << " in: " << printed;
  }
  EXPECT_EQ(printed.find("group #" + std::to_string(*controls.describe + 1)), std::string::npos)
      << "one group only: " << printed;
}

}  // namespace
}  // namespace kiln::fusion_test
