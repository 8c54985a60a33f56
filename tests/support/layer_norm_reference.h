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

}  // namespace kiln::test
