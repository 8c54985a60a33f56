// The median of a benchmark's samples (the upper one of an even count; 0 for none), shared by
// the benchmarks with and without Google Benchmark.
#pragma once

#include <algorithm>
#include <vector>

namespace kiln::bench {

inline double median(std::vector<double> samples) {
  if (samples.empty()) return 0.0;
  std::nth_element(samples.begin(),
                   samples.begin() + static_cast<std::ptrdiff_t>(samples.size() / 2),
                   samples.end());
  return samples[samples.size() / 2];
}

}  // namespace kiln::bench
