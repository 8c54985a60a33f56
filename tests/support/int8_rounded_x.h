// x as the quantized products that round it to int8 see it (CUDA's matrix-vector kernel for a
// GGUF weight and at most 4 rows of x, the CPU's VNNI kernels for every GGUF kind of
// weights): each value rounded to f32, then blocks of 32 along each row of k values: d = amax /
// 127 in f32, code round(x / d) (halves away from zero) within +-127, value d * code. A block that
// holds a NaN or an infinity becomes NaN. Written from that description, not from either kernel.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace kiln::test {

inline std::vector<double> int8_rounded_x(const std::vector<double>& x, std::int64_t k) {
  std::vector<double> out(x.size());
  const auto width = static_cast<std::size_t>(k);
  for (std::size_t row = 0; row + width <= x.size(); row += width) {
    for (std::size_t b = row; b < row + width; b += 32) {
      const std::size_t end = std::min(b + 32, row + width);
      float amax = 0.0f;
      bool finite = true;
      for (std::size_t e = b; e < end; ++e) {
        const float v = std::fabs(static_cast<float>(x[e]));
        finite = finite && std::isfinite(v);
        amax = std::max(amax, v);
      }
      const float d = amax / 127.0f;
      for (std::size_t e = b; e < end; ++e) {
        const double q =
            d != 0.0f ? std::round(static_cast<double>(static_cast<float>(x[e]) / d)) : 0.0;
        out[e] = finite ? static_cast<double>(d) * std::clamp(q, -127.0, 127.0)
                        : std::numeric_limits<double>::quiet_NaN();
      }
    }
  }
  return out;
}

}  // namespace kiln::test
