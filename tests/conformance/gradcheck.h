// Gradient checks for the conformance table: the gradients backward() reports against central
// finite differences in float64, on random inputs in every layout, on the autodiff form of the
// device under test. A gradcheck row names the ops it differentiates with a "grad:" prefix, and
// a coverage test fails while a differentiable op has none.
//
//   KILN_CONFORMANCE_ROW(grad_exp, ({"grad:exp"})) {
//     for (Layout layout : kLayouts) {
//       gradcheck(device, "exp", {{Shape{3, 4}, layout}}, [](const Prims& in) {
//         return detail::exp(in[0]);
//       });
//     }
//   }
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "conformance/conformance.h"

namespace kiln::conformance {

using Prims = std::vector<Primitive>;
using GradFn = std::function<Primitive(const Prims&)>;

// A differentiable input: its shape, layout, and values (random in [lo, hi] when empty).
struct GradInput {
  Shape shape;
  Layout layout = Layout::Contiguous;
  std::vector<double> values = {};
  double lo = -2.0;
  double hi = 2.0;
};

struct GradcheckOptions {
  double eps = 1e-6;        // finite-difference step
  double tolerance = 1e-5;  // |analytic - numeric| <= tolerance * max(1, |numeric|)
  // Also compare the analytic gradients computed in f32, f16 and bf16 with the f64 ones.
  bool check_dtypes = true;
  std::uint64_t seed = 7;
};

// Checks d/d(input i) of sum(f(inputs) * w), for a fixed random w of f's output shape. f runs on
// tracked tensors (for backward) and on untracked ones (for the differences); non-float inputs
// (indices, masks) are captured by f as constants.
void gradcheck(const Device& device, const std::string& context, std::vector<GradInput> inputs,
               const GradFn& f, GradcheckOptions options = {});

}  // namespace kiln::conformance
