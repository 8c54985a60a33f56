// Op codes, names, groups, accepted kinds and who implements each op, derived from ops.def.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace kiln {

enum class OpCode : std::uint16_t {
#define KILN_OP(name, ...) name,
#include "kiln/detail/ops.def"
#undef KILN_OP
};

enum class OpAvailability : std::uint8_t { Required, Default, Later };

// ops.def's amp column: the dtype an op runs in inside an AutocastScope (see ops.def).
enum class AutocastPolicy : std::uint8_t { Low, F32, Widest, Keep };

// Kind flags of an op: which tensor kinds it accepts.
inline constexpr std::uint8_t kKindFloat = 1, kKindInt = 2, kKindBool = 4;

struct OpInfo {
  OpCode code;
  std::string_view name;
  std::string_view group;
  std::uint8_t kinds;
  OpAvailability availability;
  bool cpu_kernel;      // impl C or S: the CPU backend (or its strided base) overrides it
  bool cuda_kernel;     // impl G or S: the CUDA backend (or its strided base) overrides it
  bool differentiable;  // impl D: autodiff has a backward rule
  bool strided_view;    // impl S: StridedBackend has it, once for the CPU and CUDA backends
  bool product_head;    // impl H: a product heading its fused group (its epilogue may follow)
  bool host_transfer;   // impl R: moves values to the host or another device (not capturable)
  bool value_shape;     // impl V: its result's shape depends on the values (not capturable)
  AutocastPolicy autocast;
};

std::span<const OpInfo> all_ops() noexcept;
const OpInfo& op_info(OpCode code) noexcept;

}  // namespace kiln
