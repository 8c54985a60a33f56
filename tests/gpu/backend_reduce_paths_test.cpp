// Every reduction kernel path (reduce.h: a warp or a block per contiguous line, lines cut into
// chunks and finished by warps or blocks, strided columns with scalar or vector loads) for every
// reducer and dtype, against the CPU backend on the same data: full reductions, last and first
// and middle dims, transposed / sliced / flipped views, size-1 and empty dims, NaN and inf.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gpu/cpu_reference.h"
#include "gpu/gpu_test_support.h"

using namespace kiln;
using kiln::test::expect_close_to_cpu;
using kiln::test::host_values;

namespace {

// One rounding in the dtype (test::tolerance_of); f64 sums taken in another order than the CPU's
// differ by more than that, so 1e-9 there.
double rounding_of(DType dtype) { return dtype == DType::F64 ? 1e-9 : test::tolerance_of(dtype); }

const DType kDTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::I32,
                         DType::I16, DType::I8,  DType::U64, DType::U32,  DType::U16, DType::U8};

enum class Layout { Contiguous, Transposed, Sliced, Flipped };

struct Case {
  Shape shape;  // of the tensor reduced (after the layout's view)
  std::int64_t dim;
  Layout layout;
  const char* path;  // what it exercises, for failure messages
};

const Case kCases[] = {
    {Shape{5, 33}, 1, Layout::Contiguous, "a warp per short row"},
    {Shape{4, 1000}, 1, Layout::Contiguous, "a warp per row"},
    {Shape{3, 4097}, 1, Layout::Contiguous, "a block per row, odd length"},
    {Shape{2, 100000}, 1, Layout::Contiguous, "long rows in chunks, finished by warps"},
    {Shape{1, 1000000}, 1, Layout::Contiguous, "one very long row in chunks, finished by a block"},
    {Shape{300, 33}, 0, Layout::Contiguous, "columns, scalar loads, chunked"},
    {Shape{257, 64}, 0, Layout::Contiguous, "columns, vector loads, chunked"},
    {Shape{4, 50, 6}, 1, Layout::Contiguous, "a middle dim"},
    {Shape{100, 64}, 0, Layout::Transposed, "transposed: rows with a stride"},
    {Shape{100, 64}, 1, Layout::Transposed, "transposed: columns"},
    {Shape{5, 4097}, 1, Layout::Sliced, "rows starting off 16-byte boundaries"},
    {Shape{10, 300}, 1, Layout::Flipped, "a negative stride"},
    {Shape{6, 1}, 1, Layout::Contiguous, "a size-1 dim"},
    {Shape{1, 1}, 0, Layout::Contiguous, "one element"},
};

// The view of a case, taken the same way on either device from the same stored values.
Primitive view(const Primitive& stored, Layout layout) {
  switch (layout) {
    case Layout::Contiguous:
      return stored;
    case Layout::Transposed:
      return detail::transpose(stored);
    case Layout::Sliced:
      return detail::narrow(stored, 1, 1, stored->shape()[1] - 3);
    case Layout::Flipped:
      return detail::flip(stored, {1});
  }
  return stored;
}

Shape stored_shape(const Case& c) {
  if (c.layout == Layout::Transposed) return Shape{c.shape[1], c.shape[0]};
  if (c.layout == Layout::Sliced) return Shape{c.shape[0], c.shape[1] + 3};
  return c.shape;
}

using Op = std::function<Primitive(const Primitive&)>;

// The reducers a dtype takes along dim, with the tolerance each one's result needs.
std::vector<std::tuple<std::string, Op, double>> reducers(DType dtype, std::int64_t dim) {
  const double sum_tolerance = rounding_of(dtype);
  std::vector<std::tuple<std::string, Op, double>> all = {
      {"sum_dim", [=](const Primitive& x) { return detail::sum_dim(x, dim); }, sum_tolerance},
      {"prod_dim", [=](const Primitive& x) { return detail::prod_dim(x, dim); }, sum_tolerance},
      {"max_dim", [=](const Primitive& x) { return detail::max_dim(x, dim); }, 0.0},
      {"min_dim", [=](const Primitive& x) { return detail::min_dim(x, dim); }, 0.0},
      {"argmax", [=](const Primitive& x) { return detail::argmax(x, dim); }, 0.0},
      {"argmin", [=](const Primitive& x) { return detail::argmin(x, dim); }, 0.0},
      {"any_dim", [=](const Primitive& x) { return detail::any_dim(x, dim); }, 0.0},
      {"all_dim", [=](const Primitive& x) { return detail::all_dim(x, dim); }, 0.0},
  };
  if (is_float(dtype)) {
    all.push_back(
        {"mean_dim", [=](const Primitive& x) { return detail::mean_dim(x, dim); }, sum_tolerance});
  }
  return all;
}

// Values of a case: floats in [-2, 2] with NaN / +inf / -inf in a few lines (every third
// seed), or near 1 for products; integers in a small range, so argmax/argmin meet many ties.
Primitive case_values(const Shape& shape, DType dtype, std::uint64_t seed, bool product) {
  if (!is_float(dtype)) return host_values(shape, dtype, seed, is_unsigned_int(dtype) ? 0 : -4, 4);
  if (product) return host_values(shape, dtype, seed, 0.999, 1.001, {{7, -1.0}});
  if (seed % 3 == 0)
    return host_values(shape, dtype, seed, -2, 2, {{5, NAN}, {40, INFINITY}, {70, -INFINITY}});
  return host_values(shape, dtype, seed, -2, 2);
}

}  // namespace

TEST(GpuReducePaths, EveryReducerDtypeAndPathMatchesTheCpu) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 1;
  for (DType dtype : kDTypes) {
    for (const Case& c : kCases) {
      const Primitive general = case_values(stored_shape(c), dtype, seed++, false);
      const Primitive product = case_values(stored_shape(c), dtype, seed++, true);
      for (const auto& [name, op, tolerance] : reducers(dtype, c.dim)) {
        const Primitive& stored = name == "prod_dim" ? product : general;
        const std::string what = name + " " + std::string(dtype_name(dtype)) + " " +
                                 c.shape.to_string() + " dim " + std::to_string(c.dim) + " (" +
                                 c.path + ")";
        const TensorData got =
            detail::into_data(op(view(detail::to_device(stored, device), c.layout)));
        const TensorData want = detail::into_data(op(view(stored, c.layout)));
        expect_close_to_cpu(got, want, tolerance, what);
      }
    }
  }
}

TEST(GpuReducePaths, FullReductionsOfEveryDtypeMatchTheCpu) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 900;
  for (DType dtype : kDTypes) {
    for (const Shape& shape : {Shape{3000}, Shape{64, 4100}, Shape{1}}) {
      const Primitive x = case_values(shape, dtype, seed++, false);
      const Primitive near_one = case_values(shape, dtype, seed++, true);
      const double tolerance = rounding_of(dtype);
      const std::string what = std::string(dtype_name(dtype)) + " " + shape.to_string();
      auto both = [&](const Primitive& values, const std::function<Primitive(Primitive)>& op,
                      double tol, const std::string& name) {
        expect_close_to_cpu(detail::into_data(op(detail::to_device(values, device))),
                            detail::into_data(op(values)), tol, name + " " + what);
        // The same elements permuted: read in place (no copy) by the cuda overrides.
        if (shape.rank() == 2) {
          expect_close_to_cpu(
              detail::into_data(op(detail::transpose(detail::to_device(values, device)))),
              detail::into_data(op(detail::transpose(values))), tol,
              name + " of the transpose " + what);
        }
      };
      both(
          x, [](Primitive v) { return detail::sum(std::move(v)); }, tolerance, "sum");
      both(
          near_one, [](Primitive v) { return detail::prod(std::move(v)); }, tolerance, "prod");
      both(
          x, [](Primitive v) { return detail::max(std::move(v)); }, 0, "max");
      both(
          x, [](Primitive v) { return detail::min(std::move(v)); }, 0, "min");
      both(
          x, [](Primitive v) { return detail::any(std::move(v)); }, 0, "any");
      both(
          x, [](Primitive v) { return detail::all(std::move(v)); }, 0, "all");
      if (is_float(dtype))
        both(
            x, [](Primitive v) { return detail::mean(std::move(v)); }, tolerance, "mean");
    }
  }
}

TEST(GpuReducePaths, BoolAnyAndAllMatchTheCpu) {
  KILN_REQUIRE_GPU();
  // Mostly true, with all-true and all-false lines along both dims.
  Primitive truth = detail::greater_elem(host_values(Shape{64, 5000}, DType::F32, 77, 0, 1), 0.002);
  truth = detail::slice_fill(truth, {Slice{3, 4, 1}, Slice{0, 5000, 1}}, false);
  for (std::int64_t dim : {0, 1}) {
    for (bool any : {true, false}) {
      auto op = [&](const Primitive& x) {
        return any ? detail::any_dim(x, dim) : detail::all_dim(x, dim);
      };
      expect_close_to_cpu(
          detail::into_data(op(detail::to_device(truth, device))), detail::into_data(op(truth)), 0,
          std::string(any ? "any_dim" : "all_dim") + " bool dim " + std::to_string(dim));
    }
  }
  expect_close_to_cpu(detail::into_data(detail::any(detail::to_device(truth, device))),
                      detail::into_data(detail::any(truth)), 0, "any bool");
  expect_close_to_cpu(detail::into_data(detail::all(detail::to_device(truth, device))),
                      detail::into_data(detail::all(truth)), 0, "all bool");
}

TEST(GpuReducePaths, EmptyDimsAndEmptyOutputsMatchTheCpu) {
  KILN_REQUIRE_GPU();
  for (DType dtype : {DType::F32, DType::I32, DType::U8}) {
    for (const Shape& shape : {Shape{5, 0}, Shape{0, 5}}) {
      const Primitive x = host_values(shape, dtype, 3, 0, 1);
      const Primitive g = detail::to_device(x, device);
      const std::string what = std::string(dtype_name(dtype)) + " " + shape.to_string();
      for (std::int64_t dim : {0, 1}) {
        const std::string at = what + " dim " + std::to_string(dim);
        expect_close_to_cpu(detail::into_data(detail::sum_dim(g, dim)),
                            detail::into_data(detail::sum_dim(x, dim)), 0, "sum_dim " + at);
        expect_close_to_cpu(detail::into_data(detail::prod_dim(g, dim)),
                            detail::into_data(detail::prod_dim(x, dim)), 0, "prod_dim " + at);
        expect_close_to_cpu(detail::into_data(detail::any_dim(g, dim)),
                            detail::into_data(detail::any_dim(x, dim)), 0, "any_dim " + at);
        expect_close_to_cpu(detail::into_data(detail::all_dim(g, dim)),
                            detail::into_data(detail::all_dim(x, dim)), 0, "all_dim " + at);
        if (is_float(dtype)) {
          expect_close_to_cpu(detail::into_data(detail::mean_dim(g, dim)),
                              detail::into_data(detail::mean_dim(x, dim)), 0, "mean_dim " + at);
        }
      }
      expect_close_to_cpu(detail::into_data(detail::sum(g)), detail::into_data(detail::sum(x)), 0,
                          "sum " + what);
    }
  }
}

// The shapes of issue 5's benchmark rows, through the public API (x.sum(), x.sum_dim(1),
// x.sum_dim(0)): the full reduction is one line in ~1000 chunks, the last dim a block per row,
// the first dim columns with vector loads in chunks.
TEST(GpuReducePaths, Square8192MatchesTheCpu) {
  KILN_REQUIRE_GPU();
  device.seed(11);
  auto gpu = Tensor<2>::random({8192, 8192}, Distribution::normal(0, 1), device);
  auto cpu = gpu.to_device(Device::cpu());
  expect_close_to_cpu(gpu.sum().into_data(), cpu.sum().into_data(), 1e-5, "sum");
  expect_close_to_cpu(gpu.sum_dim(1).into_data(), cpu.sum_dim(1).into_data(), 1e-5, "sum_dim(1)");
  expect_close_to_cpu(gpu.sum_dim(0).into_data(), cpu.sum_dim(0).into_data(), 1e-5, "sum_dim(0)");
  expect_close_to_cpu(gpu.mean().into_data(), cpu.mean().into_data(), 1e-5, "mean");
  expect_close_to_cpu(gpu.max().into_data(), cpu.max().into_data(), 0, "max");
  expect_close_to_cpu(gpu.argmax(1).into_data(), cpu.argmax(1).into_data(), 0, "argmax(1)");
  expect_close_to_cpu(gpu.argmin(0).into_data(), cpu.argmin(0).into_data(), 0, "argmin(0)");
  expect_close_to_cpu(gpu.transpose().sum().into_data(), cpu.sum().into_data(), 1e-5,
                      "sum of the transpose");
  expect_close_to_cpu(gpu.transpose().sum_dim(1).into_data(),
                      cpu.transpose().sum_dim(1).into_data(), 1e-5, "sum_dim(1) of the transpose");
  auto half = gpu.cast(DType::BF16);
  expect_close_to_cpu(half.sum_dim(1).into_data(),
                      half.to_device(Device::cpu()).sum_dim(1).into_data(), 1.6e-2,
                      "bf16 sum_dim(1)");
}

// No float atomics: the same input gives the same bits, run after run.
TEST(GpuReducePaths, SumsAreDeterministic) {
  KILN_REQUIRE_GPU();
  device.seed(12);
  auto x = Tensor<2>::random({4096, 4096}, Distribution::normal(0, 1), device);
  for (int run = 0; run < 2; ++run) {
    const auto full = x.sum().into_data().to_vec<float>();
    const auto rows = x.sum_dim(1).into_data().to_vec<float>();
    const auto columns = x.sum_dim(0).into_data().to_vec<float>();
    for (int again = 0; again < 3; ++again) {
      EXPECT_EQ(x.sum().into_data().to_vec<float>(), full);
      EXPECT_EQ(x.sum_dim(1).into_data().to_vec<float>(), rows);
      EXPECT_EQ(x.sum_dim(0).into_data().to_vec<float>(), columns);
    }
  }
}
