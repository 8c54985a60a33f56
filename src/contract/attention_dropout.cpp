#include "contract/attention_dropout.h"

#include <algorithm>
#include <cmath>

namespace kiln {

AttentionDropout::AttentionDropout(double p) {
  constexpr double kLevels = 16777216.0;  // 2^24
  threshold = static_cast<std::uint32_t>(std::clamp(std::nearbyint(p * kLevels), 0.0, kLevels));
  scale = p >= 1.0 ? 0.0f : static_cast<float>(1.0 / (1.0 - p));
}

}  // namespace kiln
