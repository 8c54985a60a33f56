// Conformance rows: reductions (sum, mean, prod, max/min, argmax/argmin, any/all), norms,
// variance and cumulative ops, against float64 loops.
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <tuple>

#include "conformance/conformance.h"
#include "tensor/common.h"

namespace kiln::conformance {
namespace {

using LineRef = std::function<double(const std::vector<double>&)>;

Shape keep_dim(const Shape& shape, std::int64_t dim) {
  Shape out = shape;
  out[static_cast<std::size_t>(dim)] = 1;
  return out;
}

// ref(line) for every line of values along dim (row-major over the kept shape).
std::vector<double> reduce_lines(const std::vector<double>& values, const Shape& shape,
                                 std::int64_t dim, const LineRef& ref) {
  const Shape out = keep_dim(shape, dim);
  const std::int64_t n = shape[static_cast<std::size_t>(dim)];
  std::vector<double> expected(static_cast<std::size_t>(out.num_elements()));
  for (std::size_t i = 0; i < expected.size(); ++i) {
    auto index = unravel(static_cast<std::int64_t>(i), out);
    std::vector<double> line;
    for (std::int64_t j = 0; j < n; ++j) {
      index[static_cast<std::size_t>(dim)] = j;
      line.push_back(values[static_cast<std::size_t>(ravel(index, shape))]);
    }
    expected[i] = ref(line);
  }
  return expected;
}

// Lines along dim transformed in place by ref (scans), same shape.
std::vector<double> scan_lines(
    const std::vector<double>& values, const Shape& shape, std::int64_t dim,
    const std::function<std::vector<double>(const std::vector<double>&)>& ref) {
  std::vector<double> expected(values.size());
  const Shape out = keep_dim(shape, dim);
  const std::int64_t n = shape[static_cast<std::size_t>(dim)];
  for (std::int64_t i = 0; i < out.num_elements(); ++i) {
    auto index = unravel(i, out);
    std::vector<double> line;
    std::vector<std::size_t> positions;
    for (std::int64_t j = 0; j < n; ++j) {
      index[static_cast<std::size_t>(dim)] = j;
      positions.push_back(static_cast<std::size_t>(ravel(index, shape)));
      line.push_back(values[positions.back()]);
    }
    const std::vector<double> result = ref(line);
    for (std::size_t j = 0; j < positions.size(); ++j) expected[positions[j]] = result[j];
  }
  return expected;
}

double ref_sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
double ref_prod(const std::vector<double>& v) {
  double s = 1;
  for (double x : v) s *= x;
  return s;
}
// PyTorch's max/min: NaN wins.
double ref_extremum(const std::vector<double>& v, bool is_max) {
  double best = is_max ? -INFINITY : INFINITY;
  for (double x : v) {
    if (std::isnan(x)) return x;
    best = is_max ? std::max(best, x) : std::min(best, x);
  }
  return best;
}
// First position of the max/min, or of the first NaN.
double ref_arg(const std::vector<double>& v, bool is_max) {
  std::size_t best = 0;
  for (std::size_t j = 0; j < v.size(); ++j) {
    if (std::isnan(v[j])) return static_cast<double>(j);
    if (is_max ? v[j] > v[best] : v[j] < v[best]) best = j;
  }
  return static_cast<double>(best);
}

// The shapes every reduction row walks: plain, size-1 dims, empty dims, rank 1 and 3.
const std::vector<Shape>& reduce_shapes() {
  static const std::vector<Shape> shapes = {{3, 5}, {4, 1, 6}, {2, 3, 4}, {0, 4}, {7}, {1, 1}};
  return shapes;
}

// Where NaN is placed to test propagation: one in the middle and one later.
void add_nans(std::vector<double>& values) {
  if (values.size() > 3) values[values.size() / 2] = kNaN;
  if (values.size() > 5) values[values.size() - 2] = kNaN;
}

struct ReduceCase {
  const char* name;
  std::function<Primitive(Primitive)> full;
  std::function<Primitive(Primitive, std::int64_t)> along;
  std::function<double(const std::vector<double>&, DType)> ref;
  bool float_only;
  bool needs_elements;  // max/min: undefined on nothing
  double lo, hi;        // input range
};

void run_reduce(const Device& device, const ReduceCase& c, bool with_nan) {
  std::uint64_t seed = 1000;
  for (DType dtype : kNumericDTypes) {
    if (c.float_only && !is_float(dtype)) continue;
    if (with_nan && !is_float(dtype)) continue;
    for (Layout layout : kLayouts) {
      for (const Shape& shape : reduce_shapes()) {
        auto values = random_values(shape, dtype, seed++, c.lo, c.hi);
        if (with_nan) add_nans(values);
        const std::string ctx = std::string(c.name) + (with_nan ? " nan " : " ") +
                                context(device, dtype, layout, shape);
        Primitive x = make_primitive(values, shape, dtype, layout, device);
        auto line_ref = [&](const std::vector<double>& v) { return c.ref(v, dtype); };
        if (!c.needs_elements || shape.num_elements() > 0) {
          std::vector<double> expected = {line_ref(values)};
          expected = representable(expected, dtype);
          expect_close(detail::into_data(c.full(x)), Shape{1}, dtype, expected, ctx + " full");
        }
        const auto rank = static_cast<std::int64_t>(shape.rank());
        for (std::int64_t dim = 0; dim < rank; ++dim) {
          if (c.needs_elements && shape[static_cast<std::size_t>(dim)] == 0) continue;
          std::vector<double> expected = reduce_lines(values, shape, dim, line_ref);
          expected = representable(expected, dtype);
          // The negative spelling of the same dim must give the same result.
          const std::int64_t api_dim = dim % 2 == 1 ? dim - rank : dim;
          expect_close(detail::into_data(c.along(x, api_dim)), keep_dim(shape, dim), dtype,
                       expected, ctx + " dim " + std::to_string(api_dim));
        }
      }
    }
  }
}

const std::vector<ReduceCase>& reduce_cases() {
  static const std::vector<ReduceCase> cases = {
      {"sum", detail::sum, detail::sum_dim,
       [](const std::vector<double>& v, DType d) { return wrap_to(ref_sum(v), d); }, false, false,
       -100, 100},
      {"prod", detail::prod, detail::prod_dim,
       [](const std::vector<double>& v, DType d) { return wrap_to(ref_prod(v), d); }, false, false,
       -2, 2},
      {"mean", detail::mean, detail::mean_dim,
       [](const std::vector<double>& v, DType) {
         return v.empty() ? kNaN : ref_sum(v) / static_cast<double>(v.size());
       },
       true, false, -3, 3},
      {"max", detail::max, detail::max_dim,
       [](const std::vector<double>& v, DType) { return ref_extremum(v, true); }, false, true, -3,
       3},
      {"min", detail::min, detail::min_dim,
       [](const std::vector<double>& v, DType) { return ref_extremum(v, false); }, false, true, -3,
       3},
  };
  return cases;
}

const ReduceCase& reduce_case(const std::string& name) {
  for (const ReduceCase& c : reduce_cases()) {
    if (name == c.name) return c;
  }
  throw std::logic_error("no reduce case " + name);
}

}  // namespace

KILN_CONFORMANCE_ROW(sum, ({"sum", "sum_dim"})) { run_reduce(device, reduce_case("sum"), false); }

KILN_CONFORMANCE_ROW(prod, ({"prod", "prod_dim"})) {
  run_reduce(device, reduce_case("prod"), false);
  run_reduce(device, reduce_case("prod"), true);
}

KILN_CONFORMANCE_ROW(mean, ({"mean", "mean_dim"})) {
  run_reduce(device, reduce_case("mean"), false);
  run_reduce(device, reduce_case("mean"), true);
}

KILN_CONFORMANCE_ROW(max_min, ({"max", "min", "max_dim", "min_dim"})) {
  for (const char* name : {"max", "min"}) {
    run_reduce(device, reduce_case(name), false);
    run_reduce(device, reduce_case(name), true);
  }
}

namespace {

// log(sum(exp(v))) shifted by the line's maximum; NaN wins, then +inf; nothing (or only -inf) is
// -inf.
double ref_logsumexp(const std::vector<double>& v) {
  double max = -kInf;
  for (double x : v) {
    if (std::isnan(x)) return x;
    max = std::max(max, x);
  }
  if (!std::isfinite(max)) return max;
  double sum = 0;
  for (double x : v) sum += std::exp(x - max);
  return max + std::log(sum);
}

}  // namespace

// Values up to +-100, where exp overflows every float but f64 without the shift; NaN and
// infinities in some lines; a line of -inf only.
KILN_CONFORMANCE_ROW(logsumexp, ({"logsumexp_dim"})) {
  std::uint64_t seed = 1700;
  for (DType dtype : kFloatDTypes) {
    for (Layout layout : kLayouts) {
      for (const Shape& shape : reduce_shapes()) {
        for (bool special : {false, true}) {
          auto values = random_values(shape, dtype, seed++, -100, 100);
          if (special && values.size() > 5) {
            values[values.size() / 2] = kNaN;
            values[0] = kInf;
            values[values.size() - 1] = -kInf;
          }
          const std::string ctx = std::string("logsumexp") + (special ? " special " : " ") +
                                  context(device, dtype, layout, shape);
          Primitive x = make_primitive(values, shape, dtype, layout, device);
          const auto rank = static_cast<std::int64_t>(shape.rank());
          for (std::int64_t dim = 0; dim < rank; ++dim) {
            std::vector<double> expected =
                representable(reduce_lines(values, shape, dim, ref_logsumexp), dtype);
            const std::int64_t api_dim = dim % 2 == 1 ? dim - rank : dim;
            expect_close(detail::into_data(detail::logsumexp_dim(x, api_dim)), keep_dim(shape, dim),
                         dtype, expected, ctx + " dim " + std::to_string(api_dim));
          }
        }
      }
    }
    const std::vector<double> lines = {-kInf, -kInf, -kInf, -kInf, 1.5, 2.0};
    Primitive x = make_primitive(lines, Shape{2, 3}, dtype, Layout::Contiguous, device);
    expect_close(detail::into_data(detail::logsumexp_dim(x, 1)), Shape{2, 1}, dtype,
                 representable({-kInf, ref_logsumexp({-kInf, 1.5, 2.0})}, dtype),
                 "logsumexp -inf lines " + std::string(dtype_name(dtype)));
  }
  for (DType dtype : kIntDTypes) {
    Primitive x = make_primitive({1, 2}, Shape{2}, dtype, Layout::Contiguous, device);
    EXPECT_THROW(detail::logsumexp_dim(x, 0), DTypeMismatch) << dtype_name(dtype);
  }
}

// Integer sums wrap to the dtype's width (accumulated in 64 bits first).
KILN_CONFORMANCE_ROW(sum_int_wrap, ({"sum", "sum_dim"})) {
  for (DType dtype : {DType::I8, DType::U8, DType::I16, DType::I32}) {
    const Shape shape{3, 40};
    auto values = random_values(shape, dtype, 77, 100, 120);
    Primitive x = make_primitive(values, shape, dtype, Layout::Contiguous, device);
    expect_close(detail::into_data(detail::sum(x)), Shape{1}, dtype,
                 {wrap_to(ref_sum(values), dtype)}, "sum wrap " + std::string(dtype_name(dtype)));
    expect_close(
        detail::into_data(detail::sum_dim(x, 1)), Shape{3, 1}, dtype,
        reduce_lines(values, shape, 1,
                     [&](const std::vector<double>& v) { return wrap_to(ref_sum(v), dtype); }),
        "sum_dim wrap " + std::string(dtype_name(dtype)));
  }
}

KILN_CONFORMANCE_ROW(argmax_argmin,
                     ({"argmax", "argmin", "max_dim_with_indices", "min_dim_with_indices"})) {
  const DType index_dtype = detail::default_dtype(device, Kind::Int);
  std::uint64_t seed = 2000;
  for (DType dtype : kNumericDTypes) {
    for (bool with_nan : {false, true}) {
      if (with_nan && !is_float(dtype)) continue;
      for (Layout layout : kLayouts) {
        for (const Shape& shape : reduce_shapes()) {
          // A narrow range gives ties: the first position must win.
          auto values = random_values(shape, dtype, seed++, -2, 2);
          if (is_float(dtype)) {
            for (double& v : values) v = std::round(v);
          }
          if (with_nan) add_nans(values);
          Primitive x = make_primitive(values, shape, dtype, layout, device);
          const auto rank = static_cast<std::int64_t>(shape.rank());
          for (std::int64_t dim = 0; dim < rank; ++dim) {
            if (shape[static_cast<std::size_t>(dim)] == 0) continue;
            const std::int64_t api_dim = dim == rank - 1 ? -1 : dim;
            const Shape out = keep_dim(shape, dim);
            const std::string ctx = context(device, dtype, layout, shape) + " dim " +
                                    std::to_string(api_dim) + (with_nan ? " nan" : "");
            for (bool is_max : {true, false}) {
              const auto positions = reduce_lines(
                  values, shape, dim, [&](const auto& v) { return ref_arg(v, is_max); });
              const auto extrema = representable(
                  reduce_lines(values, shape, dim,
                               [&](const auto& v) { return ref_extremum(v, is_max); }),
                  dtype);
              const std::string name = is_max ? "max" : "min";
              Primitive arg = is_max ? detail::argmax(x, api_dim) : detail::argmin(x, api_dim);
              expect_close(detail::into_data(arg), out, index_dtype, positions,
                           "arg" + name + " " + ctx);
              auto [v, i] = is_max ? detail::max_dim_with_indices(x, api_dim)
                                   : detail::min_dim_with_indices(x, api_dim);
              expect_close(detail::into_data(v), out, dtype, extrema,
                           name + "_dim_with_indices values " + ctx);
              expect_close(detail::into_data(i), out, index_dtype, positions,
                           name + "_dim_with_indices indices " + ctx);
            }
          }
        }
      }
    }
  }
}

KILN_CONFORMANCE_ROW(any_all, ({"any", "all", "any_dim", "all_dim"})) {
  std::vector<DType> dtypes(std::begin(kNumericDTypes), std::end(kNumericDTypes));
  dtypes.push_back(DType::Bool);
  std::uint64_t seed = 3000;
  for (DType dtype : dtypes) {
    for (Layout layout : kLayouts) {
      for (const Shape& shape : reduce_shapes()) {
        for (int pattern = 0; pattern < 4; ++pattern) {
          // Mixed, all zero, all non-zero, and NaN (non-zero) among zeros.
          auto values = random_values(shape, dtype, seed++, -1, 1);
          for (double& v : values) {
            if (pattern == 0 && is_float(dtype) && v < 0) v = 0;
            if (pattern == 1 || pattern == 3) v = 0;
            if (pattern == 2 && v == 0) v = 1;
          }
          if (pattern == 3 && is_float(dtype) && !values.empty()) values[values.size() / 2] = kNaN;
          Primitive x = make_primitive(values, shape, dtype, layout, device);
          const std::string ctx =
              context(device, dtype, layout, shape) + " pattern " + std::to_string(pattern);
          auto ref_any = [](const std::vector<double>& v) {
            for (double e : v) {
              if (e != 0) return 1.0;  // NaN != 0
            }
            return 0.0;
          };
          auto ref_all = [](const std::vector<double>& v) {
            for (double e : v) {
              if (e == 0) return 0.0;
            }
            return 1.0;
          };
          expect_close(detail::into_data(detail::any(x)), Shape{1}, DType::Bool, {ref_any(values)},
                       "any " + ctx);
          expect_close(detail::into_data(detail::all(x)), Shape{1}, DType::Bool, {ref_all(values)},
                       "all " + ctx);
          const auto rank = static_cast<std::int64_t>(shape.rank());
          for (std::int64_t dim = 0; dim < rank; ++dim) {
            const std::int64_t api_dim = dim - rank;  // negative spelling
            expect_close(detail::into_data(detail::any_dim(x, api_dim)), keep_dim(shape, dim),
                         DType::Bool, reduce_lines(values, shape, dim, ref_any),
                         "any_dim " + ctx + " dim " + std::to_string(dim));
            expect_close(detail::into_data(detail::all_dim(x, api_dim)), keep_dim(shape, dim),
                         DType::Bool, reduce_lines(values, shape, dim, ref_all),
                         "all_dim " + ctx + " dim " + std::to_string(dim));
          }
        }
      }
    }
  }
}

KILN_CONFORMANCE_ROW(cumulative, ({"cumsum", "cumprod", "cummin", "cummax"})) {
  struct Case {
    const char* name;
    std::function<Primitive(Primitive, std::int64_t)> op;
    std::function<double(double, double)> step;  // acc, value -> acc
    double init;
    double lo, hi;
  };
  auto extremum_step = [](bool is_max) {
    return [is_max](double acc, double v) {
      if (std::isnan(acc) || std::isnan(v)) return kNaN;
      return is_max ? std::max(acc, v) : std::min(acc, v);
    };
  };
  const std::vector<Case> cases = {
      {"cumsum", detail::cumsum, [](double a, double v) { return a + v; }, 0.0, -50, 50},
      {"cumprod", detail::cumprod, [](double a, double v) { return a * v; }, 1.0, -2, 2},
      {"cummin", detail::cummin, extremum_step(false), INFINITY, -3, 3},
      {"cummax", detail::cummax, extremum_step(true), -INFINITY, -3, 3},
  };
  const std::vector<Shape> shapes = {{3, 5}, {2, 3, 4}, {0, 3}, {4, 1}, {9}, {5, 70}};
  std::uint64_t seed = 4000;
  for (const Case& c : cases) {
    for (DType dtype : kNumericDTypes) {
      for (bool with_nan : {false, true}) {
        if (with_nan && !is_float(dtype)) continue;
        for (Layout layout : kLayouts) {
          for (const Shape& shape : shapes) {
            auto values = random_values(shape, dtype, seed++, c.lo, c.hi);
            if (with_nan) add_nans(values);
            Primitive x = make_primitive(values, shape, dtype, layout, device);
            const auto rank = static_cast<std::int64_t>(shape.rank());
            for (std::int64_t dim = 0; dim < rank; ++dim) {
              auto expected = scan_lines(values, shape, dim, [&](const std::vector<double>& v) {
                std::vector<double> out;
                double acc = c.init;
                for (double e : v) {
                  acc = c.step(acc, e);
                  out.push_back(wrap_to(acc, dtype));
                }
                return out;
              });
              expected = representable(expected, dtype);
              const std::int64_t api_dim = dim == rank - 1 ? -1 : dim;
              // cumprod of 70 values grows past what 16-bit floats hold exactly.
              const double scale = std::string(c.name) == "cumprod" ? 4.0 : 1.0;
              expect_close(detail::into_data(c.op(x, api_dim)), shape, dtype, expected,
                           std::string(c.name) + " " + context(device, dtype, layout, shape) +
                               " dim " + std::to_string(api_dim) + (with_nan ? " nan" : ""),
                           scale);
            }
          }
        }
      }
    }
  }
}

// Long reductions: blocked/pairwise f64 accumulation keeps f32 sums at f32 precision, and the
// multi-threaded paths (full chunks, lines, column blocks) agree with the reference.
KILN_CONFORMANCE_ROW(sum_accuracy, ({"sum", "sum_dim", "mean", "mean_dim", "cumsum"})) {
  const std::int64_t n = 1'000'000;
  {
    auto x = Tensor<1>::from_data(TensorData::from_vec(std::vector<float>(n, 0.1f), {n}), device);
    const double expected = static_cast<double>(0.1f) * static_cast<double>(n);
    const double got = x.sum().into_scalar<double>();
    EXPECT_NEAR(got, expected, expected * 1e-6) << "sum of 1e6 x 0.1f";
    const double got_mean = x.mean().into_scalar<double>();
    EXPECT_NEAR(got_mean, 0.1, 1e-6) << "mean of 1e6 x 0.1f";
    // cumsum keeps the running total in double too.
    const auto running = x.cumsum(0).into_data().to_vec<float>();
    EXPECT_NEAR(running.back(), expected, expected * 1e-6) << "cumsum of 1e6 x 0.1f";
  }
  const Shape shape{2000, 500};
  auto values = random_values(shape, DType::F32, 99, -1, 1);
  for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
    Primitive x = make_primitive(values, shape, DType::F32, layout, device);
    const std::string ctx = "sum_accuracy " + layout_name(layout);
    expect_close(detail::into_data(detail::sum(x)), Shape{1}, DType::F32, {ref_sum(values)},
                 ctx + " full", 0.05);
    for (std::int64_t dim : {0, 1}) {
      expect_close(detail::into_data(detail::sum_dim(x, dim)), keep_dim(shape, dim), DType::F32,
                   reduce_lines(values, shape, dim, ref_sum), ctx + " dim " + std::to_string(dim),
                   0.05);
      auto means = reduce_lines(values, shape, dim, [](const std::vector<double>& v) {
        return ref_sum(v) / static_cast<double>(v.size());
      });
      expect_close(detail::into_data(detail::mean_dim(x, dim)), keep_dim(shape, dim), DType::F32,
                   means, ctx + " mean dim " + std::to_string(dim), 0.05);
    }
  }
  // f64: values of very different magnitudes still sum to the f64 reference.
  const Shape wide{3, 300000};
  auto big = random_values(wide, DType::F64, 7, -1e6, 1e6);
  Primitive xb = make_primitive(big, wide, DType::F64, Layout::Contiguous, device);
  expect_close(detail::into_data(detail::sum_dim(xb, 1)), Shape{3, 1}, DType::F64,
               reduce_lines(big, wide, 1, ref_sum), "sum f64 long lines");
}

// var and norm are composed of reductions and elementwise ops in the tensor layer.
KILN_CONFORMANCE_ROW(var_norm, ({"mean_dim", "sum_dim", "sum", "max_dim", "min_dim"})) {
  std::uint64_t seed = 5000;
  for (DType dtype : kFloatDTypes) {
    for (Layout layout : kLayouts) {
      for (const Shape& shape : {Shape{3, 5}, Shape{2, 3, 4}, Shape{1, 6}}) {
        auto values = random_values(shape, dtype, seed++, -3, 3);
        Primitive x = make_primitive(values, shape, dtype, layout, device);
        const std::string ctx = context(device, dtype, layout, shape);
        const auto rank = static_cast<std::int64_t>(shape.rank());
        for (std::int64_t dim = 0; dim < rank; ++dim) {
          for (std::int64_t correction : {0, 1}) {
            auto expected = reduce_lines(values, shape, dim, [&](const std::vector<double>& v) {
              const double m = ref_sum(v) / static_cast<double>(v.size());
              double s = 0;
              for (double e : v) s += (e - m) * (e - m);
              const double divisor =
                  static_cast<double>(v.size()) - static_cast<double>(correction);
              return divisor > 0 ? s / divisor : (s == 0 ? kNaN : INFINITY);
            });
            expect_close(detail::into_data(detail::var_dim(x, dim - rank, correction)),
                         keep_dim(shape, dim), dtype, representable(expected, dtype),
                         "var " + ctx + " dim " + std::to_string(dim) + " correction " +
                             std::to_string(correction),
                         4.0);
          }
        }
        for (double p : {2.0, 1.0, 0.0, 3.0, 0.5, kInf, -kInf}) {
          auto ref_norm = [p](const std::vector<double>& v) {
            if (std::isinf(p)) {
              double best = p > 0 ? 0.0 : INFINITY;
              for (double e : v)
                best = p > 0 ? std::max(best, std::fabs(e)) : std::min(best, std::fabs(e));
              return best;
            }
            double s = 0;
            for (double e : v) s += p == 0 ? (e != 0 ? 1.0 : 0.0) : std::pow(std::fabs(e), p);
            return p == 0 ? s : std::pow(s, 1.0 / p);
          };
          const std::string pctx = "norm p=" + std::to_string(p) + " " + ctx;
          expect_close(detail::into_data(detail::norm(x, p)), Shape{1}, dtype,
                       representable({ref_norm(values)}, dtype), pctx, 4.0);
          for (std::int64_t dim = 0; dim < rank; ++dim) {
            expect_close(detail::into_data(detail::norm_dim(x, p, dim)), keep_dim(shape, dim),
                         dtype, representable(reduce_lines(values, shape, dim, ref_norm), dtype),
                         pctx + " dim " + std::to_string(dim), 4.0);
          }
        }
      }
    }
  }
}

// Sizes that take the multi-threaded paths: lines, column blocks wider than one block
// (257 columns), more rows than one row block (1500), where the first maximum lies in the
// second row block behind ties.
KILN_CONFORMANCE_ROW(reduce_large, ({"max_dim_with_indices", "argmin", "prod_dim", "any_dim",
                                     "all_dim", "cummax"})) {
  const DType index_dtype = detail::default_dtype(device, Kind::Int);
  const Shape shape{1500, 257};
  for (DType dtype : {DType::F32, DType::I32}) {
    auto values = random_values(shape, dtype, 11, -3, 3);
    for (std::size_t i = 0; i < values.size(); ++i) {
      values[i] = std::round(values[i]);
      if (i < 1100 * 257 && values[i] > 2) values[i] = 2;
    }
    if (is_float(dtype)) values[1300 * 257 + 5] = kNaN;
    for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
      Primitive x = make_primitive(values, shape, dtype, layout, device);
      const std::string ctx = context(device, dtype, layout, shape);
      for (std::int64_t dim : {0, 1}) {
        const Shape out = keep_dim(shape, dim);
        const std::string dctx = ctx + " dim " + std::to_string(dim);
        auto [v, i] = detail::max_dim_with_indices(x, dim);
        expect_close(
            detail::into_data(v), out, dtype,
            reduce_lines(values, shape, dim, [](const auto& l) { return ref_extremum(l, true); }),
            "max_dim_with_indices values " + dctx);
        expect_close(
            detail::into_data(i), out, index_dtype,
            reduce_lines(values, shape, dim, [](const auto& l) { return ref_arg(l, true); }),
            "max_dim_with_indices indices " + dctx);
        expect_close(
            detail::into_data(detail::argmin(x, dim)), out, index_dtype,
            reduce_lines(values, shape, dim, [](const auto& l) { return ref_arg(l, false); }),
            "argmin " + dctx);
        expect_close(detail::into_data(detail::any_dim(detail::equal_elem(x, 3), dim)), out,
                     DType::Bool,
                     reduce_lines(values, shape, dim,
                                  [](const auto& l) {
                                    for (double e : l) {
                                      if (e == 3) return 1.0;
                                    }
                                    return 0.0;
                                  }),
                     "any_dim (== 3) " + dctx, 1.0);
        auto cummax = scan_lines(values, shape, dim, [](const std::vector<double>& l) {
          std::vector<double> r;
          double acc = -INFINITY;
          for (double e : l) {
            acc = (std::isnan(acc) || std::isnan(e)) ? kNaN : std::max(acc, e);
            r.push_back(acc);
          }
          return r;
        });
        expect_close(detail::into_data(detail::cummax(x, dim)), shape, dtype, cummax,
                     "cummax " + dctx);
      }
    }
  }
  // prod and all over long lines of values near 1 (no overflow), both orders.
  const Shape wide{40, 3000};
  auto near_one = random_values(wide, DType::F64, 12, 0.999, 1.001);
  for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
    Primitive x = make_primitive(near_one, wide, DType::F64, layout, device);
    for (std::int64_t dim : {0, 1}) {
      expect_close(detail::into_data(detail::prod_dim(x, dim)), keep_dim(wide, dim), DType::F64,
                   reduce_lines(near_one, wide, dim, ref_prod),
                   "prod_dim " + layout_name(layout) + " dim " + std::to_string(dim), 100.0);
      expect_close(
          detail::into_data(detail::all_dim(x, dim)), keep_dim(wide, dim), DType::Bool,
          std::vector<double>(static_cast<std::size_t>(keep_dim(wide, dim).num_elements()), 1.0),
          "all_dim " + layout_name(layout));
    }
  }
}

// Views with negative strides (flip) and zero strides (expand) are read in place.
KILN_CONFORMANCE_ROW(reduce_views,
                     ({"sum", "sum_dim", "max", "max_dim", "argmax", "any_dim", "cumsum"})) {
  const DType index_dtype = detail::default_dtype(device, Kind::Int);
  const Shape base_shape{4, 300};
  for (DType dtype : {DType::F32, DType::I32}) {
    auto base = random_values(base_shape, dtype, 21, -50, 50);
    Primitive contiguous = make_primitive(base, base_shape, dtype, Layout::Contiguous, device);
    // Flipped along both dims: logical (i, j) is base (3 - i, 299 - j).
    std::vector<double> flipped(base.size());
    for (std::int64_t i = 0; i < 4; ++i) {
      for (std::int64_t j = 0; j < 300; ++j) {
        flipped[static_cast<std::size_t>(i * 300 + j)] =
            base[static_cast<std::size_t>((3 - i) * 300 + (299 - j))];
      }
    }
    // Row 1 expanded to 5 rows: every logical row is base row 1.
    const Shape expanded_shape{5, 300};
    std::vector<double> expanded;
    for (std::int64_t i = 0; i < 5; ++i) {
      expanded.insert(expanded.end(), base.begin() + 300, base.begin() + 600);
    }
    const Primitive row = detail::slice(contiguous, {Slice(1, 2), Slice::all()});
    const std::vector<std::tuple<std::string, Primitive, std::vector<double>, Shape>> views = {
        {"flip", detail::flip(contiguous, {0, 1}), flipped, base_shape},
        {"expand", detail::expand(row, expanded_shape), expanded, expanded_shape},
    };
    for (const auto& [name, x, values, shape] : views) {
      const std::string ctx = name + " " + std::string(dtype_name(dtype));
      auto sum_ref = [&](const std::vector<double>& v) { return wrap_to(ref_sum(v), dtype); };
      expect_close(detail::into_data(detail::sum(x)), Shape{1}, dtype, {sum_ref(values)},
                   "sum " + ctx);
      expect_close(detail::into_data(detail::max(x)), Shape{1}, dtype, {ref_extremum(values, true)},
                   "max " + ctx);
      for (std::int64_t dim : {0, 1}) {
        const Shape out = keep_dim(shape, dim);
        const std::string dctx = ctx + " dim " + std::to_string(dim);
        expect_close(detail::into_data(detail::sum_dim(x, dim)), out, dtype,
                     reduce_lines(values, shape, dim, sum_ref), "sum_dim " + dctx);
        expect_close(
            detail::into_data(detail::max_dim(x, dim)), out, dtype,
            reduce_lines(values, shape, dim, [](const auto& l) { return ref_extremum(l, true); }),
            "max_dim " + dctx);
        expect_close(
            detail::into_data(detail::argmax(x, dim)), out, index_dtype,
            reduce_lines(values, shape, dim, [](const auto& l) { return ref_arg(l, true); }),
            "argmax " + dctx);
        expect_close(detail::into_data(detail::any_dim(x, dim)), out, DType::Bool,
                     reduce_lines(values, shape, dim,
                                  [](const std::vector<double>& l) {
                                    for (double e : l) {
                                      if (e != 0) return 1.0;
                                    }
                                    return 0.0;
                                  }),
                     "any_dim " + dctx);
        auto running = scan_lines(values, shape, dim, [&](const std::vector<double>& l) {
          std::vector<double> r;
          double acc = 0;
          for (double e : l) r.push_back(wrap_to(acc += e, dtype));
          return r;
        });
        expect_close(detail::into_data(detail::cumsum(x, dim)), shape, dtype, running,
                     "cumsum " + dctx);
      }
    }
  }
}

}  // namespace kiln::conformance
