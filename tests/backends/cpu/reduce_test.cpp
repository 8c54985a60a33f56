// The CPU reduction and scan driver (src/backends/cpu/reduce.h): every path of the plan (full
// reductions of contiguous and strided inputs, one line per output, column blocks), on 1 and
// several threads, for views, empty and size-1 dims, the kernels shared by integer width, NaN
// and ties. Every result is checked against a float64 loop written here.
#include "backends/cpu/reduce.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "backends/cpu/cpu_tensor.h"
#include "contract/backend.h"
#include "runtime/registry.h"
#include "support/spread.h"

namespace kiln::reduce_test {
namespace {

using cpu::as_cpu;

Backend& backend() { return backend_for(Device::cpu()); }

Primitive tensor(const std::vector<double>& values, const Shape& shape, DType dtype) {
  const Kind kind = is_float(dtype) ? Kind::Float : is_bool(dtype) ? Kind::Bool : Kind::Int;
  return detail::from_data(TensorData::from_vec(values, shape).convert(dtype), Device::cpu(), kind,
                           shape.rank());
}
// Values that every dtype of the tests holds exactly (small integers).
Primitive random_tensor(const Shape& shape, std::uint32_t seed, DType dtype = DType::F64) {
  std::vector<double> v = test::spread(shape.num_elements(), seed, -8.0, 8.0);
  for (double& x : v) x = std::round(x);
  return tensor(v, shape, dtype);
}
std::vector<double> values(const Primitive& x) { return detail::into_data(x).to_f64_vec(); }

// The reduction of x along dim (every element when dim < 0) by f over the line's values,
// row-major over the kept positions.
std::vector<double> reference(const Primitive& x, std::int64_t dim,
                              const std::function<double(const std::vector<double>&)>& f) {
  const std::vector<double> v = values(x);
  const Shape& shape = x->shape();
  if (dim < 0) return {f(v)};
  const std::size_t d = static_cast<std::size_t>(dim);
  std::int64_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < d; ++i) outer *= shape[i];
  for (std::size_t i = d + 1; i < shape.rank(); ++i) inner *= shape[i];
  std::vector<double> out;
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      std::vector<double> line;
      for (std::int64_t j = 0; j < shape[d]; ++j) {
        line.push_back(v[static_cast<std::size_t>((o * shape[d] + j) * inner + i)]);
      }
      out.push_back(f(line));
    }
  }
  return out;
}

double sum_of(const std::vector<double>& line) {
  return std::accumulate(line.begin(), line.end(), 0.0);
}
double max_of(const std::vector<double>& line) {
  double m = -std::numeric_limits<double>::infinity();
  for (double x : line) m = std::isnan(x) || std::isnan(m) ? NAN : std::max(m, x);
  return m;
}
double argmax_of(const std::vector<double>& line) {
  std::size_t best = 0;
  for (std::size_t j = 0; j < line.size(); ++j) {
    if (std::isnan(line[best])) break;
    if (std::isnan(line[j]) || line[j] > line[best]) best = j;
  }
  return static_cast<double>(best);
}

void expect_values(const Primitive& got, const std::vector<double>& want, const std::string& what,
                   double tolerance = 0.0) {
  const std::vector<double> have = values(got);
  ASSERT_EQ(have.size(), want.size()) << what;
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const bool same = (std::isnan(want[i]) && std::isnan(have[i])) ||
                      std::abs(have[i] - want[i]) <= tolerance * std::max(1.0, std::abs(want[i]));
    if (!same && mismatches++ < 3) {
      ADD_FAILURE() << what << " [" << i << "]: got " << have[i] << ", want " << want[i];
    }
  }
  EXPECT_EQ(mismatches, 0u) << what;
}

class CpuReduce : public ::testing::Test {
 protected:
  void SetUp() override { saved_threads_ = omp_get_max_threads(); }
  void TearDown() override { omp_set_num_threads(saved_threads_); }

 private:
  int saved_threads_ = 1;
};

// Each shape and dim picks a path: the last dim of a row-major tensor is one line per output,
// an outer dim goes by column blocks (wider than one block: 300 columns), a whole tensor is cut
// into fixed chunks (more than one: 70000 elements), and so are fewer long lines than threads.
TEST_F(CpuReduce, EveryPathOnOneAndSeveralThreads) {
  struct Case {
    Shape shape;
    std::int64_t dim;
  };
  const Case cases[] = {
      {Shape{7, 300}, 1},    {Shape{300, 7}, 0},    {Shape{5, 9, 300}, 1}, {Shape{3, 1100, 300}, 1},
      {Shape{70000}, -1},    {Shape{350, 200}, -1}, {Shape{1}, 0},         {Shape{4, 1, 3}, 1},
      {Shape{2, 140000}, 1}, {Shape{140000, 2}, 0}};
  for (const int threads : {1, 3}) {
    omp_set_num_threads(threads);
    for (const Case& c : cases) {
      const Primitive x = random_tensor(c.shape, 1);
      const std::string what =
          c.shape.to_string() + " dim " + std::to_string(c.dim) + " on " + std::to_string(threads);
      const bool all = c.dim < 0;
      expect_values(all ? backend().sum(x) : backend().sum_dim(x, c.dim),
                    reference(x, c.dim, sum_of), "sum " + what);
      expect_values(all ? backend().max(x) : backend().max_dim(x, c.dim),
                    reference(x, c.dim, max_of), "max " + what);
      if (!all) {
        expect_values(backend().argmax(x, c.dim, DType::I64), reference(x, c.dim, argmax_of),
                      "argmax " + what);
      }
    }
  }
}

TEST_F(CpuReduce, ViewsAreReadInPlace) {
  const Primitive permuted = backend().permute(random_tensor(Shape{6, 80, 5}, 2), {2, 0, 1});
  const Primitive sliced =
      backend().slice(random_tensor(Shape{6, 14, 18}, 3), {{1, 5, 1}, {2, 6, 2}, {3, 8, 2}});
  ASSERT_FALSE(as_cpu(permuted).is_contiguous());
  for (const Primitive& x : {permuted, sliced}) {
    const std::string what = x->shape().to_string();
    expect_values(backend().sum(x), reference(x, -1, sum_of), "sum " + what);
    for (std::int64_t dim = 0; dim < 3; ++dim) {
      expect_values(backend().sum_dim(x, dim), reference(x, dim, sum_of),
                    "sum_dim " + std::to_string(dim) + " " + what);
      expect_values(backend().min_dim(x, dim),
                    reference(x, dim,
                              [](const std::vector<double>& l) {
                                double m = std::numeric_limits<double>::infinity();
                                for (double v : l) m = std::min(m, v);
                                return m;
                              }),
                    "min_dim " + std::to_string(dim) + " " + what);
    }
  }
}

TEST_F(CpuReduce, EmptyDimsGiveTheIdentity) {
  const Primitive x = random_tensor(Shape{3, 0, 4}, 1);
  EXPECT_EQ(backend().sum_dim(x, 1)->shape(), Shape({3, 1, 4}));
  expect_values(backend().sum_dim(x, 1), std::vector<double>(12, 0.0), "sum over empty dim");
  expect_values(backend().prod_dim(x, 1), std::vector<double>(12, 1.0), "prod over empty dim");
  expect_values(backend().sum(x), {0.0}, "sum of empty");
  EXPECT_EQ(backend().sum_dim(x, 0)->shape(), Shape({1, 0, 4}));
  expect_values(backend().all(tensor({}, Shape{0}, DType::Bool)), {1.0}, "all of empty");
  expect_values(backend().any(tensor({}, Shape{0}, DType::Bool)), {0.0}, "any of empty");
}

// Sums and products wrap in the dtype; the kernels of one width serve both signs.
TEST_F(CpuReduce, IntegerSumsWrapInTheirDtype) {
  for (const DType dtype : {DType::I8, DType::U8, DType::I16, DType::U32}) {
    const std::int64_t bits = 8 * static_cast<std::int64_t>(dtype_size(dtype));
    const double modulus = std::ldexp(1.0, static_cast<int>(bits));
    const bool is_signed = is_signed_int(dtype);
    auto wrap = [&](double v) {
      double r = std::fmod(v, modulus);
      if (r < 0) r += modulus;
      if (is_signed && r >= modulus / 2) r -= modulus;
      return r;
    };
    std::vector<double> v(600);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = is_signed ? -100.0 + i % 7 : 100.0 + i % 7;
    const Primitive x = tensor(v, Shape{2, 300}, dtype);
    const std::string what(dtype_name(dtype));
    expect_values(backend().sum(x), {wrap(sum_of(v))}, "sum " + what);
    expect_values(backend().sum_dim(x, 0),
                  reference(x, 0, [&](const std::vector<double>& l) { return wrap(sum_of(l)); }),
                  "sum_dim " + what);
    expect_values(
        backend().cumsum(x, 1),
        [&] {
          std::vector<double> out;
          for (std::size_t r = 0; r < 2; ++r) {
            double s = 0;
            for (std::size_t c = 0; c < 300; ++c) out.push_back(wrap(s += v[r * 300 + c]));
          }
          return out;
        }(),
        "cumsum " + what);
    // Signedness matters to max: -100 is below 0 in i8, 156 is above it in u8.
    expect_values(backend().max(x), {is_signed ? -94.0 : 106.0}, "max " + what);
  }
}

TEST_F(CpuReduce, NaNWinsAndTiesGoToTheFirst) {
  // NaN at column 2 of row 3 and column 299 of row 0; ties of the max at rows 1 and 5.
  for (const DType dtype : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    std::vector<double> v(8 * 300, 1.0);
    v[3 * 300 + 2] = NAN;
    v[299] = NAN;
    v[6 * 300 + 2] = NAN;
    for (std::size_t c = 0; c < 300; ++c) v[1 * 300 + c] = v[5 * 300 + c] = 5.0;
    const Primitive x = tensor(v, Shape{8, 300}, dtype);
    const std::string what(dtype_name(dtype));
    for (std::int64_t dim : {0, 1}) {
      const std::string where = what + " dim " + std::to_string(dim);
      expect_values(backend().max_dim(x, dim), reference(x, dim, max_of), "max_dim " + where);
      expect_values(backend().argmax(x, dim, DType::I32), reference(x, dim, argmax_of),
                    "argmax " + where);
      const auto [values_out, indices] = backend().max_dim_with_indices(x, dim, DType::I16);
      expect_values(values_out, reference(x, dim, max_of), "max_dim_with_indices " + where);
      expect_values(indices, reference(x, dim, argmax_of), "indices " + where);
    }
    expect_values(backend().max(x), {NAN}, "max " + what);
    expect_values(
        backend().cummax(x, 0),
        [&] {
          std::vector<double> out(v.size());
          for (std::size_t c = 0; c < 300; ++c) {
            double m = -INFINITY;
            for (std::size_t r = 0; r < 8; ++r) {
              const double e = v[r * 300 + c];
              m = std::isnan(m) || std::isnan(e) ? NAN : std::max(m, e);
              out[r * 300 + c] = m;
            }
          }
          return out;
        }(),
        "cummax " + what);
  }
}

TEST_F(CpuReduce, NegativeZeroIsFalse) {
  const Primitive x = tensor({-0.0, 0.0, -0.0}, Shape{3}, DType::F16);
  expect_values(backend().any(x), {0.0}, "any f16");
  expect_values(backend().any(backend().cast(x, DType::F32)), {0.0}, "any f32");
  expect_values(backend().all(tensor({1, 2, 255}, Shape{3}, DType::U8)), {1.0}, "all u8");
  expect_values(backend().all_dim(tensor({1, 0, 3, 4}, Shape{2, 2}, DType::I8), 1), {0.0, 1.0},
                "all_dim i8");
}

TEST_F(CpuReduce, ScansReuseAUniquelyOwnedInput) {
  for (const std::int64_t dim : {0, 1}) {
    Primitive x = random_tensor(Shape{40, 300}, 4);
    const std::vector<double> v = values(x);
    const std::byte* storage = as_cpu(x).data();
    const Primitive out = backend().cumsum(std::move(x), dim);
    EXPECT_EQ(as_cpu(out).data(), storage) << dim;
    std::vector<double> want(v.size());
    for (std::size_t r = 0; r < 40; ++r) {
      for (std::size_t c = 0; c < 300; ++c) {
        const std::size_t i = r * 300 + c;
        const std::size_t previous = dim == 0 ? i - 300 : i - 1;
        const bool first = dim == 0 ? r == 0 : c == 0;
        want[i] = v[i] + (first ? 0.0 : want[previous]);
      }
    }
    expect_values(out, want, "cumsum dim " + std::to_string(dim));
  }
}

// A sum over doubles written here, to run the driver with a kernel of its own.
struct Sum {
  using In = double;
  using Acc = double;
  Acc init() const { return 0; }
  void step(Acc& a, double v, std::int64_t) const { a += v; }
  void combine(Acc& a, const Acc& b) const { a += b; }
  void write(char* const* out, std::int64_t i, const Acc& a) const {
    reinterpret_cast<double*>(out[0])[i] = a;
  }
};

// A kernel of the wrong element type is refused, naming the op.
TEST_F(CpuReduce, KernelsOfAnotherTypeAreRefused) {
  const Sum sum;
  const Primitive x = random_tensor(Shape{4}, 1, DType::F32);
  try {
    cpu::run_reduce(x, -1, DType::F64, std::nullopt, cpu::make_reduce_kernel(sum), "test_sum");
    ADD_FAILURE() << "expected a DTypeMismatch";
  } catch (const DTypeMismatch& error) {
    EXPECT_NE(std::string(error.what()).find("test_sum"), std::string::npos) << error.what();
  }
  const Primitive y = random_tensor(Shape{3, 5}, 2);
  expect_values(
      cpu::run_reduce(y, 1, DType::F64, std::nullopt, cpu::make_reduce_kernel(sum), "test_sum")
          .first,
      reference(y, 1, sum_of), "a kernel written here");
}

}  // namespace
}  // namespace kiln::reduce_test
