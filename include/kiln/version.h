#pragma once

namespace kiln {
inline constexpr const char* kVersion = "0.1.0";
// Bumped whenever the Backend contract changes; plugins built for another value are refused.
inline constexpr int kBackendApiVersion = 1;
}  // namespace kiln
