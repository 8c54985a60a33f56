// Layer norm over the last dim in float64 loops: the reference the CPU tests and the conformance
// row compare with.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace kiln::test {

// x holds rows of width values, row after row; beta may be empty (no shift).
inline std::vector<double> layer_norm_reference(const std::vector<double>& x, std::int64_t width,
                                                const std::vector<double>& gamma,
                                                const std::vector<double>& beta, double eps) {
  std::vector<double> out(x.size());
  const std::int64_t rows = width == 0 ? 0 : static_cast<std::int64_t>(x.size()) / width;
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto row = static_cast<std::size_t>(r * width);
    double mean = 0, var = 0;
    for (std::int64_t i = 0; i < width; ++i) mean += x[row + static_cast<std::size_t>(i)];
    mean /= static_cast<double>(width);
    for (std::int64_t i = 0; i < width; ++i) {
      const double d = x[row + static_cast<std::size_t>(i)] - mean;
      var += d * d;
    }
    var /= static_cast<double>(width);
    for (std::int64_t i = 0; i < width; ++i) {
      const auto k = static_cast<std::size_t>(i);
      out[row + k] =
          (x[row + k] - mean) / std::sqrt(var + eps) * gamma[k] + (beta.empty() ? 0.0 : beta[k]);
    }
  }
  return out;
}

// layer_norm's gradients of x (dx, x's layout) and of gamma (dgamma, width values) in float64,
// given grad of the output: with x̂ = (x - mean) / sqrt(var + eps) and gx = grad * gamma,
// dx = (gx - mean(gx) - x̂ mean(gx x̂)) / sqrt(var + eps), dgamma = Σ grad x̂ over the rows.
inline void layer_norm_backward_reference(const std::vector<double>& x, std::int64_t width,
                                          const std::vector<double>& gamma,
                                          const std::vector<double>& grad, double eps,
                                          std::vector<double>& dx, std::vector<double>& dgamma) {
  dx.assign(x.size(), 0.0);
  dgamma.assign(static_cast<std::size_t>(width), 0.0);
  const std::int64_t rows = width == 0 ? 0 : static_cast<std::int64_t>(x.size()) / width;
  const auto n = static_cast<std::size_t>(width);
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto row = static_cast<std::size_t>(r) * n;
    double mean = 0, var = 0;
    for (std::size_t i = 0; i < n; ++i) mean += x[row + i];
    mean /= static_cast<double>(n);
    for (std::size_t i = 0; i < n; ++i) var += (x[row + i] - mean) * (x[row + i] - mean);
    const double rstd = 1 / std::sqrt(var / static_cast<double>(n) + eps);
    double m1 = 0, m2 = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double gx = grad[row + i] * gamma[i];
      m1 += gx;
      m2 += gx * (x[row + i] - mean) * rstd;
    }
    m1 /= static_cast<double>(n);
    m2 /= static_cast<double>(n);
    for (std::size_t i = 0; i < n; ++i) {
      const double normed = (x[row + i] - mean) * rstd;
      dx[row + i] = rstd * (grad[row + i] * gamma[i] - m1 - normed * m2);
      dgamma[i] += grad[row + i] * normed;
    }
  }
}

}  // namespace kiln::test
