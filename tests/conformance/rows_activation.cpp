// Conformance rows: activations and their gradients against float64 references, over float
// dtypes, layouts, empty shapes and the specials NaN, +-inf and +-0.
#include <cmath>
#include <functional>
#include <limits>

#include "conformance/conformance.h"
#include "tensor/common.h"

namespace kiln::conformance {
namespace {

double ref_sigmoid(double v) {
  if (v >= 0) return 1 / (1 + std::exp(-v));
  const double e = std::exp(v);
  return e / (1 + e);
}
double ref_gelu(double v) {
  if (v == -kInf) return 0;
  return 0.5 * v * std::erfc(-v / std::sqrt(2.0));
}
double ref_gelu_derivative(double v) {
  if (std::isinf(v)) return v > 0 ? 1 : 0;
  const double cdf = 0.5 * std::erfc(-v / std::sqrt(2.0));
  return cdf + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
}
double ref_silu(double v) { return v == -kInf ? 0 : v * ref_sigmoid(v); }
double ref_log_sigmoid(double v) { return std::min(v, 0.0) - std::log1p(std::exp(-std::fabs(v))); }
double ref_hard_sigmoid(double v, double alpha, double beta) {
  const double y = alpha * v + beta;
  return y != y ? y : std::clamp(y, 0.0, 1.0);
}

// Values in [lo, hi] plus NaN, +-inf and +-0 at the front (when they fit).
std::vector<double> with_specials(const Shape& shape, DType dtype, std::uint64_t seed, double lo,
                                  double hi) {
  std::vector<double> v = random_values(shape, dtype, seed, lo, hi);
  const double specials[] = {std::nan(""), kInf, -kInf, 0.0, -0.0};
  for (std::size_t i = 0; i < 5 && i < v.size(); ++i) v[i] = specials[i];
  return v;
}

KILN_CONFORMANCE_ROW(activations, ({"relu", "leaky_relu", "gelu", "sigmoid", "silu", "hard_sigmoid",
                                    "log_sigmoid"})) {
  struct Case {
    const char* name;
    std::function<Primitive(Primitive)> op;
    std::function<double(double)> ref;
    double lo, hi;
  };
  const std::vector<Case> cases = {
      {"relu", detail::relu, [](double v) { return v <= 0 ? 0.0 : v; }, -5, 5},
      {"leaky_relu", [](Primitive x) { return detail::leaky_relu(std::move(x), 0.1); },
       [](double v) { return v < 0 ? 0.1 * v : v; }, -5, 5},
      {"gelu", detail::gelu, ref_gelu, -10, 10},
      {"sigmoid", detail::sigmoid, ref_sigmoid, -100, 100},
      {"silu", detail::silu, ref_silu, -100, 100},
      {"hard_sigmoid", [](Primitive x) { return detail::hard_sigmoid(std::move(x), 0.2, 0.5); },
       [](double v) { return ref_hard_sigmoid(v, 0.2, 0.5); }, -5, 5},
      {"log_sigmoid", detail::log_sigmoid, ref_log_sigmoid, -100, 100},
  };
  std::uint64_t seed = 1000;
  for (const Case& c : cases) {
    for (DType dtype : kFloatDTypes) {
      for (Layout layout : kLayouts) {
        for (const Shape& shape : {Shape{6, 7}, Shape{0, 3}, Shape{2, 3, 4}}) {
          const auto x = with_specials(shape, dtype, seed++, c.lo, c.hi);
          std::vector<double> expected(x.size());
          for (std::size_t i = 0; i < x.size(); ++i) expected[i] = c.ref(x[i]);
          Primitive p = make_primitive(x, shape, dtype, layout, device);
          expect_close(detail::into_data(c.op(p)), shape, dtype, representable(expected, dtype),
                       std::string(c.name) + " " + context(device, dtype, layout, shape), 2.0);
        }
      }
    }
  }
  // Far tails keep full relative precision where a naive formula would round to 0 or 1.
  const std::vector<double> tails = {-30, -20, -10, 10, 20, 30};
  Primitive t = make_primitive(tails, Shape{6}, DType::F64, Layout::Contiguous, device);
  std::vector<double> sig(6), logsig(6);
  for (std::size_t i = 0; i < 6; ++i) {
    sig[i] = ref_sigmoid(tails[i]);
    logsig[i] = ref_log_sigmoid(tails[i]);
  }
  const TensorData s = detail::into_data(detail::sigmoid(t));
  const TensorData ls = detail::into_data(detail::log_sigmoid(t));
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_NEAR(s.to_f64_vec()[i] / sig[i], 1.0, 1e-12) << "sigmoid(" << tails[i] << ")";
    EXPECT_NEAR(ls.to_f64_vec()[i] / logsig[i], 1.0, 1e-12) << "log_sigmoid(" << tails[i] << ")";
  }
  // Wrong kinds are rejected, naming the op.
  Primitive ints = make_primitive({1, 2}, Shape{2}, DType::I32, Layout::Contiguous, device);
  EXPECT_THROW(detail::relu(ints), DTypeMismatch);
  EXPECT_THROW(detail::gelu(ints), DTypeMismatch);
}

KILN_CONFORMANCE_ROW(prelu, ({"prelu"})) {
  std::uint64_t seed = 1100;
  for (DType dtype : kFloatDTypes) {
    for (Layout layout : kLayouts) {
      const Shape shape{2, 3, 4};
      const auto x = with_specials(shape, dtype, seed++, -4, 4);
      Primitive px = make_primitive(x, shape, dtype, layout, device);
      for (const Shape& alpha_shape : {Shape{1, 3, 1}, Shape{1, 1, 1}, Shape{2, 3, 4}}) {
        const auto alpha = random_values(alpha_shape, dtype, seed++, -1, 1);
        Primitive pa = make_primitive(alpha, alpha_shape, dtype, Layout::Contiguous, device);
        std::vector<double> expected(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) {
          const double a =
              broadcast_at(alpha, alpha_shape, unravel(static_cast<std::int64_t>(i), shape));
          expected[i] = x[i] < 0 ? a * x[i] : x[i];
        }
        expect_close(
            detail::into_data(detail::prelu(px, pa)), shape, dtype, representable(expected, dtype),
            "prelu " + context(device, dtype, layout, shape) + " alpha " + alpha_shape.to_string());
      }
    }
  }
  Primitive x = make_primitive({1, 2, 3, 4}, Shape{2, 2}, DType::F32, Layout::Contiguous, device);
  Primitive bad = make_primitive({1, 2, 3}, Shape{1, 3}, DType::F32, Layout::Contiguous, device);
  EXPECT_THROW(detail::prelu(x, bad), ShapeMismatch);
}

KILN_CONFORMANCE_ROW(activation_backward,
                     ({"relu_backward", "sigmoid_backward", "gelu_backward"})) {
  Backend& backend = backend_for(device);
  std::uint64_t seed = 1200;
  for (DType dtype : kFloatDTypes) {
    for (Layout layout : kLayouts) {
      for (const Shape& shape : {Shape{5, 6}, Shape{0, 2}}) {
        const auto x = with_specials(shape, dtype, seed++, -5, 5);
        const auto s = random_values(shape, dtype, seed++, 0, 1);  // sigmoid outputs
        const auto g = random_values(shape, dtype, seed++, -2, 2);
        Primitive px = make_primitive(x, shape, dtype, layout, device);
        Primitive ps = make_primitive(s, shape, dtype, layout, device);
        Primitive pg = make_primitive(g, shape, dtype, Layout::Contiguous, device);
        std::vector<double> relu(x.size()), sigmoid(x.size()), gelu(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) {
          // relu_backward takes relu's output: the gradient flows where it is positive.
          const double out = x[i] <= 0 ? 0.0 : x[i];
          relu[i] = out <= 0 ? 0.0 : g[i];
          sigmoid[i] = g[i] * s[i] * (1 - s[i]);
          gelu[i] = g[i] * ref_gelu_derivative(x[i]);
        }
        Primitive relu_out = detail::relu(px);
        const std::string ctx = context(device, dtype, layout, shape);
        expect_close(detail::into_data(backend.relu_backward(relu_out, pg)), shape, dtype,
                     representable(relu, dtype), "relu_backward " + ctx);
        expect_close(detail::into_data(backend.sigmoid_backward(ps, pg)), shape, dtype,
                     representable(sigmoid, dtype), "sigmoid_backward " + ctx, 2.0);
        expect_close(detail::into_data(backend.gelu_backward(px, pg)), shape, dtype,
                     representable(gelu, dtype), "gelu_backward " + ctx, 4.0);
      }
    }
  }
}

// softmax-like op along dim of a row-major [shape] array, in float64.
std::vector<double> ref_softmax(const std::vector<double>& x, const Shape& shape, std::size_t dim,
                                int which) {
  std::vector<double> out(x.size());
  std::int64_t inner = 1;
  for (std::size_t d = dim + 1; d < shape.rank(); ++d) inner *= shape[d];
  const std::int64_t n = shape[dim];
  if (shape.num_elements() == 0) return out;
  const std::int64_t outer = shape.num_elements() / (n * inner);
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      auto at = [&](std::int64_t k) { return static_cast<std::size_t>((o * n + k) * inner + i); };
      auto value = [&](std::int64_t k) { return which == 2 ? -x[at(k)] : x[at(k)]; };
      double top = -kInf;
      bool nan = false;
      for (std::int64_t k = 0; k < n; ++k) {
        nan = nan || std::isnan(value(k));
        top = std::max(top, value(k));
      }
      double sum = 0;
      for (std::int64_t k = 0; k < n; ++k) sum += std::exp(value(k) - top);
      for (std::int64_t k = 0; k < n; ++k) {
        // A NaN, a +inf or a row of -inf leaves no distribution: NaN, as in PyTorch.
        if (nan || std::isinf(top)) {
          out[at(k)] = std::nan("");
        } else if (which == 1) {
          out[at(k)] = value(k) - top - std::log(sum);
        } else {
          out[at(k)] = std::exp(value(k) - top) / sum;
        }
      }
    }
  }
  return out;
}

// Against the float64 reference on every float dtype and layout, i64 and i32 targets, rows of
// specials (NaN, +-inf), one class, no rows (bad arguments: tests/tensor/activation_errors_test).
KILN_CONFORMANCE_ROW(softmax_cross_entropy, ({"softmax_cross_entropy"})) {
  std::uint64_t seed = 1350;
  for (DType dtype : kFloatDTypes) {
    const DType loss_dtype = dtype == DType::F16 || dtype == DType::BF16 ? DType::F32 : dtype;
    for (Layout layout : kLayouts) {
      for (const Shape& shape : {Shape{4, 9}, Shape{3, 1}, Shape{0, 5}}) {
        for (DType index : {DType::I64, DType::I32}) {
          std::vector<double> x = random_values(shape, dtype, seed++, -8, 8);
          if (x.size() >= 36) {
            x[1] = std::nan("");  // row 0
            x[10] = kInf;         // row 1: no distribution, NaN
            x[19] = -kInf;        // row 2: still a distribution
          }
          const std::vector<double> targets = random_values(Shape{shape[0]}, DType::I64, seed++, 0,
                                                            static_cast<double>(shape[1] - 1));
          Primitive logits = make_primitive(x, shape, dtype, layout, device);
          Primitive t = make_primitive(targets, Shape{shape[0]}, index, Layout::Contiguous, device);
          const auto expected = ref_softmax_cross_entropy(
              representable(x, dtype), static_cast<std::size_t>(shape[1]), targets);
          expect_close(detail::into_data(detail::softmax_cross_entropy(logits, t)), Shape{shape[0]},
                       loss_dtype, expected,
                       "softmax_cross_entropy " + context(device, dtype, layout, shape) +
                           " targets " + std::string(dtype_name(index)),
                       4.0);
        }
      }
    }
  }
  // Logits far beyond exp's range. The loss is the row's logsumexp less the target's logit, so
  // it carries the rounding of a logsumexp near 5000 (an f32 ulp of 5000 is 5e-4).
  const std::vector<double> big = {1000, 999, -1000, 0, 5000, 4999, -5000, -4000};
  for (DType dtype : {DType::F32, DType::F64}) {
    Primitive big_logits = make_primitive(big, Shape{2, 4}, dtype, Layout::Contiguous, device);
    const TensorData got = detail::into_data(
        detail::softmax_cross_entropy(big_logits, ints({0, 3}, Shape{2}, big_logits)));
    const std::vector<double> want = ref_softmax_cross_entropy(big, 4, {0, 3});
    const std::vector<double> values = got.to_f64_vec();
    for (std::size_t r = 0; r < want.size(); ++r) {
      EXPECT_NEAR(values[r], want[r], dtype == DType::F32 ? 1e-3 : 1e-9)
          << "softmax_cross_entropy large logits "
          << context(device, dtype, Layout::Contiguous, Shape{2, 4});
    }
  }
}

KILN_CONFORMANCE_ROW(softmax_family, ({"softmax", "log_softmax", "softmin"})) {
  struct Case {
    const char* name;
    Primitive (*op)(Primitive, std::int64_t);
  };
  const Case cases[] = {{"softmax", detail::softmax},
                        {"log_softmax", detail::log_softmax},
                        {"softmin", detail::softmin}};
  std::uint64_t seed = 1300;
  for (int which = 0; which < 3; ++which) {
    const Case& c = cases[which];
    for (DType dtype : kFloatDTypes) {
      for (Layout layout : kLayouts) {
        for (const Shape& shape : {Shape{3, 4, 5}, Shape{2, 0, 3}, Shape{1, 7}}) {
          auto x = random_values(shape, dtype, seed++, -6, 6);
          // One row gets -inf entries (still a distribution), one a NaN, one a +inf.
          if (x.size() >= 20) {
            x[1] = -kInf;
            x[2] = -kInf;
            x[11] = std::nan("");
            x[17] = kInf;
          }
          Primitive p = make_primitive(x, shape, dtype, layout, device);
          for (std::int64_t dim = 0; dim < static_cast<std::int64_t>(shape.rank()); ++dim) {
            const auto expected = ref_softmax(x, shape, static_cast<std::size_t>(dim), which);
            const std::string ctx = std::string(c.name) + " " +
                                    context(device, dtype, layout, shape) + " dim " +
                                    std::to_string(dim);
            expect_close(detail::into_data(c.op(p, dim)), shape, dtype,
                         representable(expected, dtype), ctx, 4.0);
            // Negative dims count from the end.
            const std::int64_t negative = dim - static_cast<std::int64_t>(shape.rank());
            expect_close(detail::into_data(c.op(p, negative)), shape, dtype,
                         representable(expected, dtype), ctx + " (negative dim)", 4.0);
          }
        }
      }
    }
    // Logits far beyond exp's range are fine after the max is subtracted.
    const std::vector<double> big = {1000, 999, -1000, 0, 5000, 4999, -5000, -4000};
    for (DType dtype : {DType::F32, DType::F64}) {
      Primitive p = make_primitive(big, Shape{2, 4}, dtype, Layout::Contiguous, device);
      expect_close(detail::into_data(c.op(p, 1)), Shape{2, 4}, dtype,
                   representable(ref_softmax(big, Shape{2, 4}, 1, which), dtype),
                   std::string(c.name) + " large logits");
    }
    Primitive ints = make_primitive({1, 2}, Shape{2}, DType::I64, Layout::Contiguous, device);
    EXPECT_THROW(c.op(ints, 0), DTypeMismatch);
    Primitive f = make_primitive({1, 2}, Shape{2}, DType::F32, Layout::Contiguous, device);
    EXPECT_THROW(c.op(f, 1), InvalidArgument);
  }
  // Each softmax row sums to 1 (to rounding) on a long row, spread over threads.
  const Shape long_rows{3, 40000};
  Primitive p = make_primitive(random_values(long_rows, DType::F32, 7, -20, 20), long_rows,
                               DType::F32, Layout::Contiguous, device);
  const std::vector<double> probabilities = detail::into_data(detail::softmax(p, 1)).to_f64_vec();
  for (std::int64_t row = 0; row < long_rows[0]; ++row) {
    double sum = 0;
    for (std::int64_t k = 0; k < long_rows[1]; ++k)
      sum += probabilities[static_cast<std::size_t>(row * long_rows[1] + k)];
    EXPECT_NEAR(sum, 1.0, 1e-4) << "row " << row;
  }
}

}  // namespace
}  // namespace kiln::conformance
