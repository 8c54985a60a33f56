#pragma once

namespace kiln {
inline constexpr const char* kVersion = "0.1.0";
// The contract's version as printed by `kiln info`. Plugins are matched by a fingerprint of the
// whole op list (src/contract/contract.h), which changes by itself with any op.
inline constexpr int kBackendApiVersion = 1;
}  // namespace kiln
