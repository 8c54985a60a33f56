// Deterministic test values without <random>'s distributions (whose output differs between
// standard libraries): the same inputs on every machine.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::test {

// n values in [lo, hi) from a linear congruential sequence started at seed.
inline std::vector<double> spread(std::int64_t n, std::uint32_t seed, double lo, double hi) {
  std::vector<double> out(static_cast<std::size_t>(n));
  std::uint32_t state = seed * 2654435761u + 1;
  for (double& v : out) {
    state = state * 1664525u + 1013904223u;
    v = lo + (hi - lo) * static_cast<double>(state >> 8) / static_cast<double>(1u << 24);
  }
  return out;
}

}  // namespace kiln::test
