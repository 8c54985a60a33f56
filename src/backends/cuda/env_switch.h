// Comparison switches of the CUDA backend: a path that is on unless its variable is "0" in the
// environment (KILN_CUDA_FUSE, KILN_CUDA_STRIDED_VECTORS, ...), so that a run can time it
// against what it replaced. Callers read it once (a function-local static).
#pragma once

#include <cstdlib>
#include <string_view>

namespace kiln::cuda {

inline bool on_unless_zero(const char* variable) {
  const char* text = std::getenv(variable);
  return text == nullptr || std::string_view(text) != "0";
}

}  // namespace kiln::cuda
