// REQUIRED ops of ops.def that the CUDA backend runs on the CPU backend, copying their tensors
// both ways. The table is how a missing GPU kernel is written down in one place (`kiln info` and
// the fallback-table test print and check it). Every REQUIRED op now has a GPU kernel, so it is
// empty; an op added to ops.def before its kernel goes here with a host call in the plugin.
#pragma once

#include <array>
#include <string_view>

namespace kiln::cuda {

inline constexpr std::array<std::string_view, 0> kHostFallbackOps{};

}  // namespace kiln::cuda
