// Conformance rows: arithmetic, unary math, comparisons, logic, bitwise, clamp.
#include <cmath>
#include <functional>

#include "conformance/conformance.h"
#include "conformance/unary_cases.h"
#include "tensor/common.h"

namespace kiln::conformance {
namespace {

using Ref = std::function<double(double, double)>;

// Python-style remainder: the sign of the divisor.
double py_remainder(double a, double b) {
  const double r = std::fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

double ref_pow(double a, double b, DType dtype) {
  if (!is_int(dtype)) return std::pow(a, b);
  if (b < 0) return a == 1 ? 1 : (a == -1 ? (std::fmod(b, 2) == 0 ? 1 : -1) : 0);
  return wrap_to(std::pow(a, b), dtype);
}

struct BinaryCase {
  const char* name;
  std::function<Primitive(Primitive, Primitive)> op;
  std::function<double(double, double, DType)> ref;
  bool float_only;
  bool nonzero_rhs;  // integer division: keep the divisor away from 0
};

const std::vector<BinaryCase>& binary_cases() {
  static const std::vector<BinaryCase> cases = {
      {"add", detail::add, [](double a, double b, DType d) { return wrap_to(a + b, d); }, false,
       false},
      {"sub", detail::sub, [](double a, double b, DType d) { return wrap_to(a - b, d); }, false,
       false},
      {"mul", detail::mul, [](double a, double b, DType d) { return wrap_to(a * b, d); }, false,
       false},
      {"div", detail::div,
       [](double a, double b, DType d) { return is_int(d) ? std::floor(a / b) : a / b; }, false,
       true},
      {"remainder", detail::remainder, [](double a, double b, DType) { return py_remainder(a, b); },
       false, true},
      {"pow", detail::pow, ref_pow, false, false},
      {"maximum", detail::maximum, [](double a, double b, DType) { return std::max(a, b); }, false,
       false},
      {"minimum", detail::minimum, [](double a, double b, DType) { return std::min(a, b); }, false,
       false},
      {"atan2", detail::atan2, [](double a, double b, DType) { return std::atan2(a, b); }, true,
       false},
      {"hypot", detail::hypot, [](double a, double b, DType) { return std::hypot(a, b); }, true,
       false},
  };
  return cases;
}

// Runs one binary case over dtypes, layouts and broadcast shapes.
void run_binary(const Device& device, const BinaryCase& c) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 5}, {3, 5}}, {{4, 1}, {1, 6}}, {{2, 7}, {1, 7}}, {{0, 3}, {1, 3}}, {{1, 1}, {5, 9}}};
  std::uint64_t seed = 1;
  for (DType dtype : kNumericDTypes) {
    if (c.float_only && !is_float(dtype)) continue;
    for (Layout layout : kLayouts) {
      for (const auto& [sa, sb] : shapes) {
        double lo = -3, hi = 3;
        if (std::string(c.name) == "pow") lo = is_float(dtype) ? 0.1 : 0, hi = 3;
        auto a = random_values(sa, dtype, seed++, lo, hi);
        auto b = random_values(sb, dtype, seed++, lo, hi);
        if (c.nonzero_rhs) {
          for (double& v : b) {
            if (v == 0) v = 1;
          }
        }
        Primitive pa = make_primitive(a, sa, dtype, layout, device);
        Primitive pb = make_primitive(b, sb, dtype, Layout::Contiguous, device);
        const Shape out = detail::broadcast_shape(sa, sb, c.name);
        std::vector<double> expected(static_cast<std::size_t>(out.num_elements()));
        for (std::size_t i = 0; i < expected.size(); ++i) {
          const auto index = unravel(static_cast<std::int64_t>(i), out);
          expected[i] = c.ref(broadcast_at(a, sa, index), broadcast_at(b, sb, index), dtype);
        }
        expected = representable(expected, dtype == DType::Bool ? DType::F64 : dtype);
        const double scale = std::string(c.name) == "pow" ? 4.0 : 1.0;
        expect_close(detail::into_data(c.op(pa, pb)), out, dtype, expected,
                     std::string(c.name) + " " + context(device, dtype, layout, sa), scale);
      }
    }
  }
}

}  // namespace

KILN_CONFORMANCE_ROW(binary_arithmetic, ({"add", "sub", "mul", "div", "remainder", "pow", "maximum",
                                          "minimum", "atan2", "hypot"})) {
  for (const BinaryCase& c : binary_cases()) run_binary(device, c);
}

KILN_CONFORMANCE_ROW(scalar_arithmetic, ({"add_scalar", "sub_scalar", "mul_scalar", "div_scalar",
                                          "remainder_scalar", "pow_scalar"})) {
  struct Case {
    const char* name;
    std::function<Primitive(Primitive, Scalar)> op;
    std::function<double(double, double, DType)> ref;
  };
  const std::vector<Case> cases = {
      {"add_scalar", detail::add_scalar,
       [](double a, double b, DType d) { return wrap_to(a + b, d); }},
      {"sub_scalar", detail::sub_scalar,
       [](double a, double b, DType d) { return wrap_to(a - b, d); }},
      {"mul_scalar", detail::mul_scalar,
       [](double a, double b, DType d) { return wrap_to(a * b, d); }},
      {"div_scalar", detail::div_scalar,
       [](double a, double b, DType d) { return is_int(d) ? std::floor(a / b) : a / b; }},
      {"remainder_scalar", detail::remainder_scalar,
       [](double a, double b, DType) { return py_remainder(a, b); }},
      {"pow_scalar", detail::pow_scalar, ref_pow},
  };
  const Shape shape{4, 6};
  std::uint64_t seed = 100;
  for (const Case& c : cases) {
    for (DType dtype : kNumericDTypes) {
      for (Layout layout : kLayouts) {
        for (double s : {2.0, 3.0, is_unsigned_int(dtype) ? 1.0 : -2.0}) {
          const bool is_pow = std::string(c.name) == "pow_scalar";
          auto a = random_values(shape, dtype, seed++, is_pow ? 0.5 : -3, 3);
          Primitive pa = make_primitive(a, shape, dtype, layout, device);
          std::vector<double> expected(a.size());
          for (std::size_t i = 0; i < a.size(); ++i) expected[i] = c.ref(a[i], s, dtype);
          expected = representable(expected, dtype);
          const Scalar scalar = is_int(dtype) ? Scalar(static_cast<std::int64_t>(s)) : Scalar(s);
          expect_close(detail::into_data(c.op(pa, scalar)), shape, dtype, expected,
                       std::string(c.name) + " " + context(device, dtype, layout, shape) +
                           " scalar " + std::to_string(s),
                       is_pow ? 4.0 : 1.0);
        }
      }
    }
  }
}

namespace {

// erf's inverse by bisection on std::erf: slow, obviously right, independent of the kernels.
double ref_erfinv(double y) {
  if (std::isnan(y) || y < -1 || y > 1) return std::nan("");
  if (y == 1 || y == -1) return std::copysign(INFINITY, y);
  double lo = -6, hi = 6;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (std::erf(mid) < y ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

}  // namespace

const std::vector<UnaryFloatCase>& unary_float_cases() {
  static const std::vector<UnaryFloatCase> cases = {
      {"exp", detail::exp, [](double v) { return std::exp(v); }, -4, 4, -2, 2},
      {"expm1", detail::expm1, [](double v) { return std::expm1(v); }, -2, 2, -2, 2},
      {"exp2", detail::exp2, [](double v) { return std::exp2(v); }, -4, 4, -2, 2},
      {"log", detail::log, [](double v) { return std::log(v); }, 0.01, 10, 0.2, 3},
      {"log1p", detail::log1p, [](double v) { return std::log1p(v); }, -0.5, 5, -0.5, 3},
      {"log2", detail::log2, [](double v) { return std::log2(v); }, 0.01, 10, 0.2, 3},
      {"log10", detail::log10, [](double v) { return std::log10(v); }, 0.01, 10, 0.2, 3},
      {"sqrt", detail::sqrt, [](double v) { return std::sqrt(v); }, 0, 10, 0.2, 3},
      {"rsqrt", detail::rsqrt, [](double v) { return 1 / std::sqrt(v); }, 0.1, 10, 0.2, 3},
      {"recip", detail::recip, [](double v) { return 1 / v; }, 0.1, 10, 0.5, 3},
      {"sin", detail::sin, [](double v) { return std::sin(v); }, -4, 4, -3, 3},
      {"cos", detail::cos, [](double v) { return std::cos(v); }, -4, 4, -3, 3},
      {"tan", detail::tan, [](double v) { return std::tan(v); }, -1.2, 1.2, -1.2, 1.2},
      {"asin", detail::asin, [](double v) { return std::asin(v); }, -0.99, 0.99, -0.9, 0.9},
      {"acos", detail::acos, [](double v) { return std::acos(v); }, -0.99, 0.99, -0.9, 0.9},
      {"atan", detail::atan, [](double v) { return std::atan(v); }, -4, 4, -3, 3},
      {"sinh", detail::sinh, [](double v) { return std::sinh(v); }, -3, 3, -2, 2},
      {"cosh", detail::cosh, [](double v) { return std::cosh(v); }, -3, 3, -2, 2},
      {"tanh", detail::tanh, [](double v) { return std::tanh(v); }, -3, 3, -2, 2},
      {"asinh", detail::asinh, [](double v) { return std::asinh(v); }, -4, 4, -3, 3},
      {"acosh", detail::acosh, [](double v) { return std::acosh(v); }, 1, 5, 1.2, 3},
      {"atanh", detail::atanh, [](double v) { return std::atanh(v); }, -0.9, 0.9, -0.9, 0.9},
      {"erf", detail::erf, [](double v) { return std::erf(v); }, -3, 3, -2, 2},
      {"erfinv", detail::erfinv, ref_erfinv, -0.99, 0.99, -0.9, 0.9},
      {"round", detail::round, [](double v) { return std::nearbyint(v); }, -5, 5, -2, 2},
      {"floor", detail::floor, [](double v) { return std::floor(v); }, -5, 5, -2, 2},
      {"ceil", detail::ceil, [](double v) { return std::ceil(v); }, -5, 5, -2, 2},
      {"trunc", detail::trunc, [](double v) { return std::trunc(v); }, -5, 5, -2, 2},
      {"sigmoid", detail::sigmoid, [](double v) { return 1 / (1 + std::exp(-v)); }, -6, 6, -3, 3},
  };
  return cases;
}

std::vector<std::string> unary_float_names(const std::string& prefix) {
  std::vector<std::string> names;
  for (const UnaryFloatCase& c : unary_float_cases()) names.push_back(prefix + c.name);
  return names;
}

KILN_CONFORMANCE_ROW(unary_float, (unary_float_names())) {
  std::uint64_t seed = 200;
  for (const UnaryFloatCase& c : unary_float_cases()) {
    for (DType dtype : kFloatDTypes) {
      for (Layout layout : kLayouts) {
        for (const Shape& shape : {Shape{5, 7}, Shape{0, 4}, Shape{1, 1}}) {
          auto a = random_values(shape, dtype, seed++, c.lo, c.hi);
          std::vector<double> expected(a.size());
          for (std::size_t i = 0; i < a.size(); ++i) expected[i] = c.ref(a[i]);
          expected = representable(expected, dtype);
          Primitive pa = make_primitive(a, shape, dtype, layout, device);
          expect_close(detail::into_data(c.op(pa)), shape, dtype, expected,
                       std::string(c.name) + " " + context(device, dtype, layout, shape), 2.0);
        }
      }
      // NaN propagates, infinities follow the function.
      const std::vector<double> special = {std::nan(""), INFINITY, -INFINITY};
      std::vector<double> expected(special.size());
      for (std::size_t i = 0; i < special.size(); ++i) expected[i] = c.ref(special[i]);
      Primitive ps = make_primitive(special, Shape{3}, dtype, Layout::Contiguous, device);
      expect_close(detail::into_data(c.op(ps)), Shape{3}, dtype, representable(expected, dtype),
                   std::string(c.name) + " nan/inf " + std::string(dtype_name(dtype)));
    }
  }
}

KILN_CONFORMANCE_ROW(unary_numeric, ({"abs", "sign", "square", "neg"})) {
  struct Case {
    const char* name;
    Primitive (*op)(Primitive);
    double (*ref)(double);
  };
  const std::vector<Case> cases = {
      {"abs", detail::abs, [](double v) { return std::fabs(v); }},
      {"sign", detail::sign, [](double v) { return v != v ? v : (v > 0) - (v < 0) * 1.0; }},
      {"square", detail::square, [](double v) { return v * v; }},
      {"neg", detail::neg, [](double v) { return -v; }},
  };
  std::uint64_t seed = 300;
  for (const Case& c : cases) {
    for (DType dtype : kNumericDTypes) {
      for (Layout layout : kLayouts) {
        const Shape shape{6, 5};
        auto a = random_values(shape, dtype, seed++);
        std::vector<double> expected(a.size());
        for (std::size_t i = 0; i < a.size(); ++i) expected[i] = wrap_to(c.ref(a[i]), dtype);
        Primitive pa = make_primitive(a, shape, dtype, layout, device);
        expect_close(detail::into_data(c.op(pa)), shape, dtype, representable(expected, dtype),
                     std::string(c.name) + " " + context(device, dtype, layout, shape));
      }
    }
  }
}

KILN_CONFORMANCE_ROW(comparisons, ({"equal", "not_equal", "greater", "greater_equal", "lower",
                                    "lower_equal", "equal_elem", "not_equal_elem", "greater_elem",
                                    "greater_equal_elem", "lower_elem", "lower_equal_elem"})) {
  struct Case {
    const char* name;
    Primitive (*op)(Primitive, Primitive);
    Primitive (*elem)(Primitive, Scalar);
    bool (*ref)(double, double);
    bool on_bool;
  };
  const std::vector<Case> cases = {
      {"equal", detail::equal, detail::equal_elem, [](double a, double b) { return a == b; }, true},
      {"not_equal", detail::not_equal, detail::not_equal_elem,
       [](double a, double b) { return a != b; }, true},
      {"greater", detail::greater, detail::greater_elem, [](double a, double b) { return a > b; },
       false},
      {"greater_equal", detail::greater_equal, detail::greater_equal_elem,
       [](double a, double b) { return a >= b; }, false},
      {"lower", detail::lower, detail::lower_elem, [](double a, double b) { return a < b; }, false},
      {"lower_equal", detail::lower_equal, detail::lower_equal_elem,
       [](double a, double b) { return a <= b; }, false},
  };
  std::uint64_t seed = 400;
  std::vector<DType> dtypes(std::begin(kNumericDTypes), std::end(kNumericDTypes));
  dtypes.push_back(DType::Bool);
  for (const Case& c : cases) {
    for (DType dtype : dtypes) {
      if (dtype == DType::Bool && !c.on_bool) continue;
      for (Layout layout : kLayouts) {
        const Shape sa{4, 5}, sb{1, 5};
        // Few distinct values so equality happens.
        auto a = random_values(sa, dtype, seed++, -2, 2);
        auto b = random_values(sb, dtype, seed++, -2, 2);
        if (is_float(dtype)) {
          for (double& v : a) v = std::round(v);
          for (double& v : b) v = std::round(v);
          a[3] = std::nan("");
        }
        Primitive pa = make_primitive(a, sa, dtype, layout, device);
        Primitive pb = make_primitive(b, sb, dtype, Layout::Contiguous, device);
        std::vector<double> expected(a.size()), expected_elem(a.size());
        const double s = is_unsigned_int(dtype) || dtype == DType::Bool ? 1.0 : -1.0;
        for (std::size_t i = 0; i < a.size(); ++i) {
          const auto index = unravel(static_cast<std::int64_t>(i), sa);
          expected[i] = c.ref(a[i], broadcast_at(b, sb, index));
          expected_elem[i] = c.ref(a[i], s);
        }
        const std::string ctx = std::string(c.name) + " " + context(device, dtype, layout, sa);
        expect_close(detail::into_data(c.op(pa, pb)), sa, DType::Bool, expected, ctx);
        const Scalar scalar = dtype == DType::Bool ? Scalar(true) : Scalar(s);
        expect_close(detail::into_data(c.elem(pa, scalar)), sa, DType::Bool, expected_elem,
                     ctx + " elem");
      }
    }
  }
  // An integer tensor against a fractional scalar compares exactly: 2 >= 2.5 is false.
  Primitive ints = make_primitive({1, 2, 3}, Shape{3}, DType::I64, Layout::Contiguous, device);
  expect_close(detail::into_data(detail::greater_equal_elem(ints, 2.5)), Shape{3}, DType::Bool,
               {0, 0, 1}, "i64 >= 2.5");
}

KILN_CONFORMANCE_ROW(nan_inf_tests, ({"is_nan", "is_inf"})) {
  const std::vector<double> values = {0, std::nan(""), INFINITY, -INFINITY, 1.5, -2};
  for (DType dtype : kFloatDTypes) {
    Primitive p = make_primitive(values, Shape{2, 3}, dtype, Layout::Contiguous, device);
    expect_close(detail::into_data(detail::is_nan(p)), Shape{2, 3}, DType::Bool, {0, 1, 0, 0, 0, 0},
                 "is_nan");
    expect_close(detail::into_data(detail::is_inf(p)), Shape{2, 3}, DType::Bool, {0, 0, 1, 1, 0, 0},
                 "is_inf");
  }
}

KILN_CONFORMANCE_ROW(logic, ({"logical_not", "logical_and", "logical_or", "logical_xor"})) {
  std::uint64_t seed = 500;
  for (Layout layout : kLayouts) {
    const Shape shape{5, 4};
    auto a = random_values(shape, DType::Bool, seed++);
    auto b = random_values(Shape{1, 4}, DType::Bool, seed++);
    Primitive pa = make_primitive(a, shape, DType::Bool, layout, device);
    Primitive pb = make_primitive(b, Shape{1, 4}, DType::Bool, Layout::Contiguous, device);
    std::vector<double> e_not(a.size()), e_and(a.size()), e_or(a.size()), e_xor(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double bv = broadcast_at(b, Shape{1, 4}, unravel(static_cast<std::int64_t>(i), shape));
      e_not[i] = a[i] == 0;
      e_and[i] = a[i] != 0 && bv != 0;
      e_or[i] = a[i] != 0 || bv != 0;
      e_xor[i] = (a[i] != 0) != (bv != 0);
    }
    const std::string ctx = context(device, DType::Bool, layout, shape);
    expect_close(detail::into_data(detail::logical_not(pa)), shape, DType::Bool, e_not,
                 "not " + ctx);
    expect_close(detail::into_data(detail::logical_and(pa, pb)), shape, DType::Bool, e_and,
                 "and " + ctx);
    expect_close(detail::into_data(detail::logical_or(pa, pb)), shape, DType::Bool, e_or,
                 "or " + ctx);
    expect_close(detail::into_data(detail::logical_xor(pa, pb)), shape, DType::Bool, e_xor,
                 "xor " + ctx);
  }
}

KILN_CONFORMANCE_ROW(bitwise, ({"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
                                "bitwise_left_shift", "bitwise_right_shift", "bitwise_and_scalar",
                                "bitwise_or_scalar", "bitwise_xor_scalar",
                                "bitwise_left_shift_scalar", "bitwise_right_shift_scalar"})) {
  std::uint64_t seed = 600;
  for (DType dtype : kIntDTypes) {
    for (Layout layout : kLayouts) {
      const Shape shape{4, 6};
      auto a = random_values(shape, dtype, seed++, -100, 100);
      auto b = random_values(shape, dtype, seed++, 0, 5);
      Primitive pa = make_primitive(a, shape, dtype, layout, device);
      Primitive pb = make_primitive(b, shape, dtype, Layout::Contiguous, device);
      auto as_int = [](double v) { return static_cast<std::int64_t>(v); };
      auto check = [&](const char* name, Primitive result, auto ref) {
        std::vector<double> expected(a.size());
        for (std::size_t i = 0; i < a.size(); ++i) {
          expected[i] = wrap_to(static_cast<double>(ref(as_int(a[i]), as_int(b[i]))), dtype);
        }
        expect_close(detail::into_data(std::move(result)), shape, dtype, expected,
                     std::string(name) + " " + context(device, dtype, layout, shape));
      };
      // Unsigned values are stored modulo 2^bits: work on the stored bit patterns.
      check("and", detail::bitwise_and(pa, pb), [](auto x, auto y) { return x & y; });
      check("or", detail::bitwise_or(pa, pb), [](auto x, auto y) { return x | y; });
      check("xor", detail::bitwise_xor(pa, pb), [](auto x, auto y) { return x ^ y; });
      check("not", detail::bitwise_not(pa), [](auto x, auto) { return ~x; });
      check("shl", detail::bitwise_left_shift(pa, pb),
            [](auto x, auto y) { return x * (std::int64_t{1} << y); });
      check("shr", detail::bitwise_right_shift(pa, pb), [](auto x, auto y) { return x >> y; });
      check("and_scalar", detail::bitwise_and_scalar(pa, 6), [](auto x, auto) { return x & 6; });
      check("or_scalar", detail::bitwise_or_scalar(pa, 6), [](auto x, auto) { return x | 6; });
      check("xor_scalar", detail::bitwise_xor_scalar(pa, 6), [](auto x, auto) { return x ^ 6; });
      check("shl_scalar", detail::bitwise_left_shift_scalar(pa, 2),
            [](auto x, auto) { return x * 4; });
      check("shr_scalar", detail::bitwise_right_shift_scalar(pa, 2),
            [](auto x, auto) { return x >> 2; });
    }
  }
}

KILN_CONFORMANCE_ROW(clamp, ({"clamp", "clamp_min", "clamp_max"})) {
  std::uint64_t seed = 700;
  for (DType dtype : kNumericDTypes) {
    for (Layout layout : kLayouts) {
      const Shape shape{5, 5};
      auto a = random_values(shape, dtype, seed++, -4, 4);
      const double lo = is_unsigned_int(dtype) ? 1 : -1, hi = 2;
      Primitive pa = make_primitive(a, shape, dtype, layout, device);
      std::vector<double> both(a.size()), low(a.size()), high(a.size());
      for (std::size_t i = 0; i < a.size(); ++i) {
        both[i] = std::min(std::max(a[i], lo), hi);
        low[i] = std::max(a[i], lo);
        high[i] = std::min(a[i], hi);
      }
      const std::string ctx = context(device, dtype, layout, shape);
      expect_close(detail::into_data(detail::clamp(pa, Scalar(lo), Scalar(hi))), shape, dtype, both,
                   "clamp " + ctx);
      expect_close(detail::into_data(detail::clamp(pa, Scalar(lo), std::nullopt)), shape, dtype,
                   low, "clamp_min " + ctx);
      expect_close(detail::into_data(detail::clamp(pa, std::nullopt, Scalar(hi))), shape, dtype,
                   high, "clamp_max " + ctx);
    }
  }
}

}  // namespace kiln::conformance
