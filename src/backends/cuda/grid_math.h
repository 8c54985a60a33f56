// Integer arithmetic of grids and tiles, shared by the plugin's launch plans.
#pragma once

#include <cstdint>

namespace kiln::cuda {

// a / b rounded up, for a >= 0 and b > 0: the tiles or blocks that cover a items.
inline constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace kiln::cuda
