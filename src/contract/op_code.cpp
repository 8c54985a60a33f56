#include "contract/op_code.h"

#include "kiln/detail/op_columns.h"

namespace kiln {
namespace {

constexpr std::uint8_t kKinds_F = kKindFloat;
constexpr std::uint8_t kKinds_I = kKindInt;
constexpr std::uint8_t kKinds_B = kKindBool;
constexpr std::uint8_t kKinds_FI = kKindFloat | kKindInt;
constexpr std::uint8_t kKinds_FIB = kKindFloat | kKindInt | kKindBool;

constexpr OpAvailability kAvailability_REQUIRED = OpAvailability::Required;
constexpr OpAvailability kAvailability_DEFAULT = OpAvailability::Default;
constexpr OpAvailability kAvailability_LATER = OpAvailability::Later;

constexpr AutocastPolicy kAutocast_LOW = AutocastPolicy::Low;
constexpr AutocastPolicy kAutocast_F32 = AutocastPolicy::F32;
constexpr AutocastPolicy kAutocast_WIDEST = AutocastPolicy::Widest;
constexpr AutocastPolicy kAutocast_KEEP = AutocastPolicy::Keep;

constexpr OpInfo kOps[] = {
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  {OpCode::name,                                                                         \
   #name,                                                                                \
   #group,                                                                               \
   kKinds_##kinds,                                                                       \
   kAvailability_##availability,                                                         \
   KILN_IMPL_CPU(impl) == 1 || KILN_IMPL_STRIDED(impl) == 1,                             \
   KILN_IMPL_CUDA(impl) == 1 || KILN_IMPL_STRIDED(impl) == 1,                            \
   KILN_IMPL_GRAD(impl) == 1,                                                            \
   KILN_IMPL_STRIDED(impl) == 1,                                                         \
   KILN_IMPL_HEAD(impl) == 1,                                                            \
   KILN_IMPL_HOST(impl) == 1,                                                            \
   KILN_IMPL_VALUE_SHAPE(impl) == 1,                                                     \
   kAutocast_##amp},
#include "kiln/detail/ops.def"
#undef KILN_OP
};

// A REQUIRED op is pure virtual in Backend: every real backend must have its kernel, its own or
// its strided base's.
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  static_assert(kAvailability_##availability != OpAvailability::Required ||              \
                    (KILN_IMPL_CPU(impl) == 1 && KILN_IMPL_CUDA(impl) == 1) ||           \
                    KILN_IMPL_STRIDED(impl) == 1,                                        \
                #name ": a REQUIRED op has impl C and G, or S, in ops.def");             \
  static_assert(KILN_IMPL_HEAD(impl) == 0 || KILN_IMPL_FUSE(impl) == 1,                  \
                #name ": impl H (a group's head) needs F in ops.def");
#include "kiln/detail/ops.def"
#undef KILN_OP

}  // namespace

std::span<const OpInfo> all_ops() noexcept { return kOps; }
const OpInfo& op_info(OpCode code) noexcept { return kOps[static_cast<std::size_t>(code)]; }

}  // namespace kiln
