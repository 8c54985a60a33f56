#include "conformance/gradcheck.h"

#include <cmath>
#include <sstream>

namespace kiln::conformance {
namespace {

Primitive weighted_sum(const Primitive& y, const Primitive& w) {
  return detail::sum(detail::mul(y, w));
}

double read_scalar(const Primitive& p) { return detail::into_data(p).to_f64_vec().at(0); }

// Analytic gradients of sum(f(inputs) * w) with inputs and w in dtype.
std::vector<std::vector<double>> analytic(const Device& ad, const std::vector<GradInput>& inputs,
                                          const std::vector<double>& w, const GradFn& f,
                                          DType dtype, const std::string& context) {
  Prims tracked;
  for (const GradInput& in : inputs) {
    tracked.push_back(
        detail::require_grad(make_primitive(in.values, in.shape, dtype, in.layout, ad), true));
  }
  Primitive y = f(tracked);
  Primitive weights = make_primitive(w, y->shape(), dtype, Layout::Contiguous, ad);
  Gradients grads = detail::backward(weighted_sum(y, weights), std::nullopt, {});
  std::vector<std::vector<double>> out;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    std::optional<Primitive> g = detail::grad(tracked[i], grads);
    const std::size_t n = static_cast<std::size_t>(inputs[i].shape.num_elements());
    if (!g) {
      out.emplace_back(n, 0.0);  // no gradient reached the input: it is zero
      continue;
    }
    EXPECT_EQ((*g)->shape(), inputs[i].shape) << context << ": gradient shape of input " << i;
    EXPECT_EQ((*g)->dtype(), dtype) << context << ": gradient dtype of input " << i;
    std::vector<double> values = detail::into_data(*g).to_f64_vec();
    values.resize(n, 0.0);
    out.push_back(std::move(values));
  }
  return out;
}

}  // namespace

void gradcheck(const Device& device, const std::string& context, std::vector<GradInput> inputs,
               const GradFn& f, GradcheckOptions options) {
  const Device ad = device.autodiff();
  std::uint64_t seed = options.seed;
  for (GradInput& in : inputs) {
    if (in.values.empty()) in.values = random_values(in.shape, DType::F64, seed++, in.lo, in.hi);
  }
  // The output shape, from an untracked run.
  Prims plain;
  for (const GradInput& in : inputs) {
    plain.push_back(make_primitive(in.values, in.shape, DType::F64, in.layout, ad));
  }
  const Shape out_shape = f(plain)->shape();
  const std::vector<double> w = random_values(out_shape, DType::F64, seed++, -1.0, 1.0);
  const Primitive weights = make_primitive(w, out_shape, DType::F64, Layout::Contiguous, ad);

  const auto exact = analytic(ad, inputs, w, f, DType::F64, context);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    GradInput& in = inputs[i];
    int reported = 0;
    for (std::size_t j = 0; j < in.values.size(); ++j) {
      const double original = in.values[j];
      auto loss_at = [&](double v) {
        in.values[j] = v;
        Prims args = plain;
        args[i] = make_primitive(in.values, in.shape, DType::F64, in.layout, ad);
        return read_scalar(weighted_sum(f(args), weights));
      };
      const double numeric =
          (loss_at(original + options.eps) - loss_at(original - options.eps)) / (2 * options.eps);
      in.values[j] = original;
      const double got = exact[i][j];
      const bool ok =
          (std::isnan(numeric) && std::isnan(got)) ||
          std::abs(got - numeric) <= options.tolerance * std::max(1.0, std::abs(numeric));
      if (!ok && reported++ < 5) {
        ADD_FAILURE() << context << " (" << layout_name(in.layout) << "): d/d input " << i
                      << " at element " << j << " (x = " << original << "): backward gave " << got
                      << ", finite differences " << numeric;
      }
    }
  }
  if (!options.check_dtypes) return;
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    if (!ad.supports_dtype(dtype)) continue;
    std::vector<GradInput> rounded = inputs;
    for (GradInput& in : rounded) in.values = representable(in.values, dtype);
    const auto reference = analytic(ad, rounded, representable(w, dtype), f, DType::F64, context);
    const auto got =
        analytic(ad, rounded, w, f, dtype, context + " " + std::string(dtype_name(dtype)));
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      double scale = 1.0;
      for (double v : reference[i]) scale = std::max(scale, std::abs(v));
      int reported = 0;
      for (std::size_t j = 0; j < reference[i].size(); ++j) {
        const double tol = tolerance(dtype) * 8 * scale;
        if (std::isnan(reference[i][j]) && std::isnan(got[i][j])) continue;
        if (std::abs(got[i][j] - reference[i][j]) > tol && reported++ < 5) {
          ADD_FAILURE() << context << " " << dtype_name(dtype) << " ("
                        << layout_name(inputs[i].layout) << "): d/d input " << i << " at element "
                        << j << ": " << got[i][j] << ", f64 gives " << reference[i][j];
        }
      }
    }
  }
}

}  // namespace kiln::conformance
