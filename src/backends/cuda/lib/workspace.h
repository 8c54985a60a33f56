// Helpers for carving one caller-provided device workspace into aligned pieces.
#pragma once

#include <cstddef>

namespace kiln::cuda::lib {

// Every piece starts on a 256-byte boundary (what cudaMalloc gives and CUB and cuBLASLt expect).
inline constexpr std::size_t kWorkspaceAlignment = 256;

constexpr std::size_t align_up(std::size_t bytes) noexcept {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

}  // namespace kiln::cuda::lib
