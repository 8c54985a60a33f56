// The fingerprint of the backend contract: a hash of every ops.def entry (name, kinds, result,
// parameters, availability) and of the plugin table's revision. libkiln and the CUDA plugin
// each compile it in; the loader refuses a plugin whose fingerprint differs, so a plugin built
// against another op list is never called through a mismatched vtable. Nothing is bumped by
// hand when an op is added or changed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

// Bumped when CudaPluginApi (cuda_plugin.h) gains, loses or reorders a member, or Backend's
// device-level virtual methods or the FusedProgram handed to run_fused change (3: run_fused;
// 4: min_fused_elements; 5: reserve_random, a step's random draw and its result shape; 6:
// nccl_status and collective_transport, and the Communicator's check, timeout, set_broken and
// attachment; 7: cudnn_status; 8: fuses_reduction_epilogues).
inline constexpr int kPluginTableRevision = 8;

namespace detail {

constexpr std::uint64_t fnv1a(std::uint64_t hash, std::string_view text) {
  for (char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return hash;
}

constexpr std::uint64_t fnv1a(std::uint64_t hash, std::uint64_t value) {
  for (int byte = 0; byte < 8; ++byte) {
    hash ^= (value >> (8 * byte)) & 0xff;
    hash *= 1099511628211ULL;
  }
  return hash;
}

}  // namespace detail

inline constexpr std::uint64_t kBackendContractHash = [] {
  std::uint64_t hash = detail::fnv1a(14695981039346656037ULL, "kiln backend contract");
  hash = detail::fnv1a(hash, static_cast<std::uint64_t>(kPluginTableRevision));
#define KILN_OP(name, group, kinds, result, parameters, arguments, availability, impl, form, amp) \
  hash = detail::fnv1a(hash, #name " " #kinds " " #result " " #parameters " " #availability ";");
#include "kiln/detail/ops.def"
#undef KILN_OP
  return hash;
}();

// The fingerprint as 16 hex digits (kiln info, the loader's message).
inline std::string contract_name(std::uint64_t hash) {
  std::string text(16, '0');
  for (int i = 15; i >= 0; --i, hash >>= 4)
    text[static_cast<std::size_t>(i)] = "0123456789abcdef"[hash & 15];
  return text;
}

}  // namespace kiln
