// The CPU elementwise driver (src/backends/cpu/elementwise.h): broadcasting with stride-0
// operands, non-contiguous views, reuse of the output, empty and one-element tensors, sizes around
// the parallel grain, 16-bit floats through f32 tiles, integer kernels shared by width and scalar
// operands. Every result is checked against a float64 loop written here, element by element.
#include "backends/cpu/elementwise.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/cpu/cpu_tensor.h"
#include "contract/backend.h"
#include "runtime/registry.h"
#include "support/spread.h"

namespace kiln::elementwise_test {
namespace {

using cpu::as_cpu;

Backend& backend() { return backend_for(Device::cpu()); }

// n deterministic values in [lo, hi).
std::vector<double> spread(std::int64_t n, std::uint32_t seed, double lo = -4.0, double hi = 4.0) {
  return test::spread(n, seed, lo, hi);
}

Primitive tensor(const std::vector<double>& values, const Shape& shape, DType dtype) {
  const Kind kind = is_float(dtype) ? Kind::Float : is_bool(dtype) ? Kind::Bool : Kind::Int;
  return detail::from_data(TensorData::from_vec(values, shape).convert(dtype), Device::cpu(), kind,
                           shape.rank());
}
Primitive random_tensor(const Shape& shape, std::uint32_t seed, DType dtype = DType::F64) {
  return tensor(spread(shape.num_elements(), seed), shape, dtype);
}

std::vector<double> values(const Primitive& x) { return detail::into_data(x).to_f64_vec(); }

// Row-major index of position flat of shape into a tensor of shape `from` broadcast to shape.
std::size_t broadcast_index(const Shape& shape, const Shape& from, std::int64_t flat) {
  std::int64_t index = 0, stride = 1;
  for (std::size_t d = shape.rank(); d-- > 0;) {
    const std::int64_t c = flat % shape[d];
    flat /= shape[d];
    const std::size_t k = d + from.rank() - shape.rank();
    if (d + from.rank() >= shape.rank()) {
      if (from[k] != 1) index += c * stride;
      stride *= from[k];
    }
  }
  return static_cast<std::size_t>(index);
}

// got == f(a, b) elementwise over the broadcast shape, a and b read in row-major order (views
// included: values() reads a view in its logical order).
void expect_binary(const Primitive& got, const Primitive& a, const Primitive& b,
                   const std::function<double(double, double)>& f, const std::string& what,
                   double tolerance = 0.0) {
  const std::vector<double> av = values(a), bv = values(b), gv = values(got);
  const Shape& shape = got->shape();
  ASSERT_EQ(gv.size(), static_cast<std::size_t>(shape.num_elements())) << what;
  std::size_t mismatches = 0;
  for (std::int64_t i = 0; i < shape.num_elements(); ++i) {
    const double want =
        f(av[broadcast_index(shape, a->shape(), i)], bv[broadcast_index(shape, b->shape(), i)]);
    const double have = gv[static_cast<std::size_t>(i)];
    const bool same = (std::isnan(want) && std::isnan(have)) ||
                      std::abs(have - want) <= tolerance * std::max(1.0, std::abs(want));
    if (!same && mismatches++ < 3) {
      ADD_FAILURE() << what << " [" << i << "]: got " << have << ", want " << want;
    }
  }
  EXPECT_EQ(mismatches, 0u) << what;
}

// A kernel over doubles that counts its runs, to see what the driver hands it.
struct Counted {
  std::atomic<std::int64_t>* runs;
  double operator()(double a, double b) const { return a * 10 + b; }
};
std::atomic<std::int64_t> g_runs{0};
void counted_loop(std::int64_t n, char* const* data, const std::int64_t* strides,
                  const void* context) {
  static_cast<const Counted*>(context)->runs->fetch_add(1);
  for (std::int64_t i = 0; i < n; ++i) {
    const double a = *reinterpret_cast<const double*>(data[1] + i * strides[1]);
    const double b = *reinterpret_cast<const double*>(data[2] + i * strides[2]);
    *reinterpret_cast<double*>(data[0] + i * strides[0]) = a * 10 + b;
  }
}
const Counted kCounted{&g_runs};
const cpu::Kernel kCountedKernel{&counted_loop, &kCounted, DType::F64, DType::F64};

double times_ten_plus(double a, double b) { return a * 10 + b; }

class CpuElementwise : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_threads_ = omp_get_max_threads();
    g_runs = 0;
  }
  void TearDown() override { omp_set_num_threads(saved_threads_); }

 private:
  int saved_threads_ = 1;
};

TEST_F(CpuElementwise, BroadcastOperandsHaveStrideZero) {
  // [3, 1, 5] with [4, 1]: both are broadcast along a dim of the other.
  const Primitive a = random_tensor(Shape{3, 1, 5}, 1), b = random_tensor(Shape{4, 1}, 2);
  const Primitive out = cpu::run_binary(a, b, DType::F64, kCountedKernel, "test");
  EXPECT_EQ(out->shape(), Shape({3, 4, 5}));
  expect_binary(out, a, b, times_ten_plus, "[3,1,5] + [4,1]");
  // Through a typed kernel too, with each broadcast side (both fast paths of binary_loop).
  for (const auto& [x, y] :
       {std::pair{random_tensor(Shape{6, 7}, 3), random_tensor(Shape{1, 7}, 4)},
        std::pair{random_tensor(Shape{6, 1}, 5), random_tensor(Shape{6, 7}, 6)},
        std::pair{random_tensor(Shape{6, 7}, 7), random_tensor(Shape{}, 8)}}) {
    const auto f = [](double u, double v) { return u - 2 * v; };
    const Primitive got =
        cpu::run_binary(x, y, DType::F64, cpu::make_binary_kernel<double, double>(f), "test");
    expect_binary(got, x, y, f, "broadcast " + x->shape().to_string() + y->shape().to_string());
  }
}

TEST_F(CpuElementwise, ShapesThatDoNotBroadcastNameTheOp) {
  const Primitive a = random_tensor(Shape{3, 4}, 1), b = random_tensor(Shape{5}, 2);
  try {
    backend().add(a, b);
    FAIL() << "no error";
  } catch (const ShapeMismatch& e) {
    EXPECT_NE(std::string(e.what()).find("[add]"), std::string::npos) << e.what();
  }
}

TEST_F(CpuElementwise, NonContiguousViews) {
  const Primitive base = random_tensor(Shape{6, 8, 5}, 1);
  const Primitive permuted = backend().permute(base, {2, 0, 1});                // [5, 6, 8]
  const Primitive sliced = backend().slice(random_tensor(Shape{6, 14, 18}, 2),  // offset and steps
                                           {{1, 5, 1}, {2, 6, 2}, {3, 8, 2}});  // [5, 6, 8]
  const Primitive expanded = backend().expand(random_tensor(Shape{1, 6, 1}, 3), Shape({5, 6, 8}));
  ASSERT_FALSE(as_cpu(permuted).is_contiguous());
  ASSERT_FALSE(as_cpu(sliced).is_contiguous());
  for (const auto& [x, y, name] : {std::tuple{permuted, sliced, "permuted, sliced"},
                                   std::tuple{sliced, expanded, "sliced, expanded"},
                                   std::tuple{expanded, permuted, "expanded, permuted"}}) {
    expect_binary(cpu::run_binary(x, y, DType::F64, kCountedKernel, "test"), x, y, times_ten_plus,
                  name);
    expect_binary(backend().sub(x, y), x, y, std::minus<>{}, std::string("sub ") + name);
  }
  // A non-contiguous view never becomes the output.
  const Primitive out = backend().neg(backend().permute(random_tensor(Shape{4, 5}, 4), {1, 0}));
  EXPECT_TRUE(as_cpu(out).is_contiguous());
}

TEST_F(CpuElementwise, ReusesAUniquelyOwnedOperand) {
  Primitive a = random_tensor(Shape{64, 3}, 1);
  const Primitive b = random_tensor(Shape{3}, 2);
  const std::vector<double> av = values(a);
  const std::byte* storage = as_cpu(a).data();
  const Primitive out = backend().add(std::move(a), b);
  EXPECT_EQ(as_cpu(out).data(), storage) << "lhs, uniquely owned, is the output";
  const std::vector<double> got = values(out), bv = values(b);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], av[i] + bv[i % 3]) << i;

  // rhs when lhs is broadcast.
  Primitive c = random_tensor(Shape{64, 3}, 3);
  const std::byte* c_storage = as_cpu(c).data();
  const Primitive out2 = backend().mul(b, std::move(c));
  EXPECT_EQ(as_cpu(out2).data(), c_storage);

  // Not when another handle shares it, nor when the output's dtype differs.
  const Primitive shared = random_tensor(Shape{64, 3}, 4);
  Primitive copy = shared;
  EXPECT_NE(as_cpu(backend().add(std::move(copy), b)).data(), as_cpu(shared).data());
  Primitive d = random_tensor(Shape{64, 3}, 5);
  const std::byte* d_storage = as_cpu(d).data();
  EXPECT_NE(as_cpu(backend().greater(std::move(d), b)).data(), d_storage);
}

TEST_F(CpuElementwise, EmptyTensorsRunNoKernel) {
  for (const Shape& shape : {Shape({0}), Shape({3, 0, 2})}) {
    const Primitive a = random_tensor(shape, 1);
    const Primitive out =
        cpu::run_binary(a, random_tensor(Shape{1}, 2), DType::F64, kCountedKernel, "test");
    EXPECT_EQ(out->shape(), shape);
    EXPECT_EQ(backend().exp(a)->shape(), shape);
    EXPECT_EQ(backend().cast(a, DType::BF16)->shape(), shape);
  }
  EXPECT_EQ(g_runs.load(), 0);
  // Broadcasting against an empty dim gives an empty result.
  EXPECT_EQ(backend().add(random_tensor(Shape{1, 3}, 3), random_tensor(Shape{0, 1}, 4))->shape(),
            Shape({0, 3}));
}

TEST_F(CpuElementwise, OneElementAndRankZero) {
  for (const Shape& shape : {Shape({}), Shape({1}), Shape({1, 1, 1})}) {
    const Primitive a = random_tensor(shape, 1), b = random_tensor(shape, 2);
    const Primitive out = cpu::run_binary(a, b, DType::F64, kCountedKernel, "test");
    EXPECT_EQ(out->shape(), shape);
    expect_binary(out, a, b, times_ten_plus, "one element " + shape.to_string());
  }
  EXPECT_EQ(g_runs.load(), 3);
}

TEST_F(CpuElementwise, SizesAroundTheParallelGrain) {
  const std::int64_t grain = cpu::elementwise_grain();
  for (const int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    for (const std::int64_t n : {grain - 1, grain, grain + 1, 2 * grain + 7, 3 * grain}) {
      const Primitive a = random_tensor(Shape{n}, 1), b = random_tensor(Shape{n}, 2);
      const std::string what = std::to_string(n) + " on " + std::to_string(threads);
      expect_binary(cpu::run_binary(a, b, DType::F64, kCountedKernel, "test"), a, b, times_ten_plus,
                    what);
      // Rows of 3 broadcast against a column: many short runs, split mid-run.
      const Primitive rows = random_tensor(Shape{n / 3, 3}, 3),
                      column = random_tensor(Shape{n / 3, 1}, 4);
      expect_binary(backend().add(rows, column), rows, column, std::plus<>{}, "rows " + what);
    }
  }
}

TEST_F(CpuElementwise, SmallContiguousOpsTakeOneKernelCall) {
  // Same shapes, contiguous, under one grain: the driver's straight-line path, one run.
  const std::int64_t grain = cpu::elementwise_grain();
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{16}, grain - 1}) {
    g_runs = 0;
    const Primitive a = random_tensor(Shape{n}, 1), b = random_tensor(Shape{n}, 2);
    expect_binary(cpu::run_binary(a, b, DType::F64, kCountedKernel, "test"), a, b, times_ten_plus,
                  "small " + std::to_string(n));
    EXPECT_EQ(g_runs.load(), 1) << n;
  }
  // At the grain and past it the general path runs it, with the same result.
  for (const std::int64_t n : {grain, grain + 1}) {
    const Primitive a = random_tensor(Shape{n}, 1), b = random_tensor(Shape{n}, 2);
    expect_binary(cpu::run_binary(a, b, DType::F64, kCountedKernel, "test"), a, b, times_ten_plus,
                  "grain " + std::to_string(n));
  }
  // A kernel's cost lowers the size the straight-line path takes.
  const std::int64_t n = grain / 4 + 1;
  cpu::Kernel costly = kCountedKernel;
  costly.cost = 4;
  const Primitive a = random_tensor(Shape{n}, 1), b = random_tensor(Shape{n}, 2);
  expect_binary(cpu::run_binary(a, b, DType::F64, costly, "test"), a, b, times_ten_plus, "costly");

  // Output reuse and in place: a uniquely owned lhs, else rhs, is written.
  Primitive x = random_tensor(Shape{4, 4}, 3);
  const Primitive y = random_tensor(Shape{4, 4}, 4);
  const std::vector<double> xv = values(x), yv = values(y);
  const std::byte* x_storage = as_cpu(x).data();
  Primitive sum = backend().add(std::move(x), y);
  EXPECT_EQ(as_cpu(sum).data(), x_storage);
  for (std::size_t i = 0; i < xv.size(); ++i) EXPECT_EQ(values(sum)[i], xv[i] + yv[i]) << i;
  Primitive z = random_tensor(Shape{4, 4}, 5);
  const std::byte* z_storage = as_cpu(z).data();
  EXPECT_EQ(as_cpu(backend().sub(y, std::move(z))).data(), z_storage);
  // Both operands one tensor (so not uniquely owned): a fresh output.
  const std::vector<double> sv = values(sum);
  const Primitive twice = backend().add(sum, sum);
  EXPECT_NE(as_cpu(twice).data(), as_cpu(sum).data());
  for (std::size_t i = 0; i < sv.size(); ++i) EXPECT_EQ(values(twice)[i], 2 * sv[i]) << i;
  // Unary, scalar and a one-element tensor.
  const Primitive one = random_tensor(Shape{1}, 6);
  const double v = values(one)[0];
  EXPECT_EQ(values(backend().neg(one))[0], -v);
  EXPECT_EQ(values(backend().mul_scalar(one, Scalar(3.0)))[0], v * 3);
  // A shared operand is not overwritten.
  EXPECT_EQ(values(one)[0], v);
  // Integers of one width share the kernel on this path too; f32 direct, bf16 is not direct.
  const Primitive i8 = tensor({-128, 127}, {2}, DType::I8);
  EXPECT_EQ(values(backend().add(i8, i8)), (std::vector<double>{0, -2}));
  const Primitive h = tensor({1.5, -2}, {2}, DType::BF16);
  EXPECT_EQ(values(backend().add(h, h)), (std::vector<double>{3, -4}));
}

TEST_F(CpuElementwise, HalfFloatsRunThroughF32Tiles) {
  // Lengths around the tile (256) with broadcast and strided operands; the result must be
  // exactly the f32 op rounded once to the storage type, as PyTorch computes it.
  for (const DType dtype : {DType::F16, DType::BF16}) {
    for (const std::int64_t n : {1, 255, 256, 257, 1000}) {
      const std::string what = std::string(dtype_name(dtype)) + " " + std::to_string(n);
      const Primitive a = random_tensor(Shape{n}, 1, dtype), b = random_tensor(Shape{n}, 2, dtype);
      const Primitive one = random_tensor(Shape{1}, 3, dtype);
      const Primitive t =
          backend().permute(random_tensor(Shape{n, 2}, 4, dtype), {1, 0});  // [2, n]
      const auto rounded = [dtype](double v) {
        return values(tensor(std::vector<double>{v}, Shape{1}, dtype))[0];
      };
      const auto add = [&](double x, double y) {
        return rounded(static_cast<float>(x) + static_cast<float>(y));
      };
      expect_binary(backend().add(a, b), a, b, add, "add " + what);
      expect_binary(backend().add(a, one), a, one, add, "add scalar-like " + what);
      expect_binary(backend().add(t, a), t, a, add, "add transposed " + what);
      expect_binary(
          backend().greater(t, a), t, a, [](double x, double y) { return x > y ? 1.0 : 0.0; },
          "greater " + what);
      const Primitive e = backend().exp(t);
      EXPECT_EQ(e->dtype(), dtype);
      expect_binary(
          e, t, t, [&](double x, double) { return rounded(std::exp(static_cast<float>(x))); },
          "exp " + what, 1e-6);
      // Casts through the tiles: to the other 16-bit float, to f64 and to an integer.
      const DType other = dtype == DType::F16 ? DType::BF16 : DType::F16;
      expect_binary(
          backend().cast(t, other), t, t,
          [&](double x, double) {
            return values(tensor(std::vector<double>{x}, Shape{1}, other))[0];
          },
          "cast " + what);
      expect_binary(
          backend().cast(t, DType::F64), t, t, [](double x, double) { return x; },
          "cast f64 " + what);
      expect_binary(
          backend().cast(t, DType::I32), t, t, [](double x, double) { return std::trunc(x); },
          "cast i32 " + what);
      expect_binary(
          backend().cast(backend().cast(t, DType::I16), dtype), t, t,
          [](double x, double) { return std::trunc(x); }, "cast from i16 " + what);
    }
  }
}

TEST_F(CpuElementwise, SignBlindIntegerOpsShareAKernelPerWidth) {
  // The u8 kernel runs on i8 storage: wrap-around and equality must still be the signed ones.
  const Primitive a = tensor({-128, -1, 0, 1, 100, 127}, {6}, DType::I8);
  const Primitive b = tensor({-1, -1, 5, 127, 100, 1}, {6}, DType::I8);
  const auto wrap8 = [](double v) {
    const std::int64_t w = static_cast<std::int64_t>(v) & 0xff;
    return static_cast<double>(w >= 128 ? w - 256 : w);
  };
  expect_binary(
      backend().add(a, b), a, b, [&](double x, double y) { return wrap8(x + y); }, "add i8");
  expect_binary(
      backend().mul(a, b), a, b, [&](double x, double y) { return wrap8(x * y); }, "mul i8");
  expect_binary(
      backend().equal(a, b), a, b, [](double x, double y) { return x == y ? 1.0 : 0.0; },
      "equal i8");
  expect_binary(
      backend().greater(a, b), a, b, [](double x, double y) { return x > y ? 1.0 : 0.0; },
      "greater i8 (signed kernel)");
  expect_binary(
      backend().bitwise_xor(a, b), a, b,
      [](double x, double y) {
        return static_cast<double>(
            static_cast<std::int8_t>(static_cast<std::int8_t>(x) ^ static_cast<std::int8_t>(y)));
      },
      "xor i8");
  // The scalar is read as the storage type first: 200 is -56 as i8.
  const Primitive s = backend().add_scalar(a, Scalar(std::int64_t{200}));
  EXPECT_EQ(s->dtype(), DType::I8);
  const std::vector<double> got = values(s), av = values(a);
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], wrap8(av[i] + static_cast<std::int8_t>(200))) << i;
  }
}

TEST_F(CpuElementwise, ScalarOperandIsBroadcast) {
  const Primitive a = backend().permute(random_tensor(Shape{5, 4}, 1), {1, 0});
  const double v = 0.5;
  const auto f = [](double x, double y) { return x * 10 + y; };
  const Primitive out =
      cpu::run_binary_scalar(a, &v, DType::F64, cpu::make_binary_kernel<double, double>(f), "test");
  const std::vector<double> got = values(out), av = values(a);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], av[i] * 10 + 0.5) << i;
  // Integers against a fractional scalar compare in double.
  const Primitive ints = tensor({1, 2, 3}, {3}, DType::I32);
  EXPECT_EQ(values(backend().greater_equal_elem(ints, Scalar(2.5))),
            (std::vector<double>{0, 0, 1}));
}

TEST_F(CpuElementwise, IntegerDivisionByZeroIsReportedAfterTheRun) {
  const Primitive a = tensor({7, -7, 3}, {3}, DType::I32), b = tensor({2, 0, 1}, {3}, DType::I32);
  for (const int threads : {1, 2}) {
    omp_set_num_threads(threads);
    EXPECT_THROW(backend().div(a, b), InvalidArgument);
    EXPECT_THROW(backend().remainder(a, b), InvalidArgument);
    EXPECT_THROW(backend().div_scalar(a, Scalar(std::int64_t{0})), InvalidArgument);
    const Primitive big = tensor(std::vector<double>(3 * cpu::elementwise_grain(), 1.0),
                                 {3 * cpu::elementwise_grain()}, DType::I64);
    const Primitive zero_at_end = backend().slice_assign(
        backend().full({3 * cpu::elementwise_grain()}, Scalar(std::int64_t{3}), DType::I64,
                       Device::cpu()),
        {{3 * cpu::elementwise_grain() - 1, 1, 1}}, tensor({0}, {1}, DType::I64));
    EXPECT_THROW(backend().div(big, zero_at_end), InvalidArgument);
  }
  EXPECT_EQ(values(backend().div(a, tensor({2, 2, 2}, {3}, DType::I32))),
            (std::vector<double>{3, -4, 1}));
  // Floats divide by zero as IEEE does.
  const std::vector<double> f = values(
      backend().div(tensor({1, -1, 0}, {3}, DType::F32), tensor({0, 0, 0}, {3}, DType::F32)));
  EXPECT_EQ(f[0], INFINITY);
  EXPECT_EQ(f[1], -INFINITY);
  EXPECT_TRUE(std::isnan(f[2]));
}

TEST_F(CpuElementwise, NaNPropagatesThroughMaximumAndTiles) {
  for (const DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    const Primitive a = tensor({NAN, 1, 2}, {3}, dtype), b = tensor({0, NAN, 1}, {3}, dtype);
    const std::vector<double> got = values(backend().maximum(a, b));
    EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[1])) << dtype_name(dtype);
    EXPECT_EQ(got[2], 2) << dtype_name(dtype);
    EXPECT_EQ(values(backend().is_nan(a)), (std::vector<double>{1, 0, 0})) << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace kiln::elementwise_test
