// The autocast layer's ops, generated from ops.def's amp column: the float inputs cast, then the
// op forwarded with the layer suspended.
#include <algorithm>

#include "contract/op_code.h"
#include "decorators/autocast/autocast_layer.h"
#include "tensor/common.h"

namespace kiln::autocast {
namespace {

// The widest float dtype among an op's inputs (f16 with bf16: f32), or nullopt with none.
struct Widest {
  std::optional<DType> dtype;

  void see(DType d) {
    if (is_float(d)) dtype = dtype ? kiln::detail::wider_float(*dtype, d) : d;
  }
  void see(const Primitive& p) { see(p->dtype()); }
  void see(const OptionalPrimitive& p) {
    if (p) see(*p);
  }
  void see(const PrimitiveList& ps) {
    for (const Primitive& p : ps) see(p);
  }
  template <class T>
  void see(const T&) {}
};

template <class... Args>
std::optional<DType> widest_float(const Args&... args) {
  Widest widest;
  (widest.see(args), ...);
  return widest.dtype;
}

// Casts one argument of an op as its policy says; other arguments pass through, moved.
class Caster {
 public:
  Caster(Backend& inner, AutocastPolicy policy, std::optional<DType> target)
      : inner_(inner), policy_(policy), target_(target) {}

  Primitive operator()(Primitive& p) const {
    const DType d = p->dtype();
    if (!target_ || !is_float(d) || d == *target_) return std::move(p);
    switch (policy_) {
      case AutocastPolicy::Low:
        if (d == DType::F64) return std::move(p);  // f64 is asked for, never narrowed
        return cast_in_scope(inner_, p, *target_);
      case AutocastPolicy::F32:
        if (d != DType::F16 && d != DType::BF16) return std::move(p);
        return inner_.cast(std::move(p), *target_);
      case AutocastPolicy::Widest:
        return inner_.cast(std::move(p), *target_);
      case AutocastPolicy::Keep:
        break;
    }
    return std::move(p);
  }
  OptionalPrimitive operator()(OptionalPrimitive& p) const {
    if (p) return (*this)(*p);
    return std::nullopt;
  }
  PrimitiveList operator()(PrimitiveList& ps) const {
    for (Primitive& p : ps) p = (*this)(p);
    return std::move(ps);
  }
  template <class T>
  T operator()(T& value) const {
    return std::move(value);
  }

 private:
  Backend& inner_;
  AutocastPolicy policy_;
  std::optional<DType> target_;
};

}  // namespace

void AutocastBackend::assign(const Primitive& dst, Primitive src) {
  forget_cast(dst);
  const Suspension suspension;
  inner().assign(dst, std::move(src));
}

#define KILN_AMP_POLICY_LOW AutocastPolicy::Low
#define KILN_AMP_POLICY_F32 AutocastPolicy::F32
#define KILN_AMP_POLICY_WIDEST AutocastPolicy::Widest
#define KILN_AMP_TARGET_LOW(args) std::optional<DType>(dtype_)
#define KILN_AMP_TARGET_F32(args) std::optional<DType>(DType::F32)
#define KILN_AMP_TARGET_WIDEST(args) widest_float args
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  KILN_WHEN(KILN_AMP_CASTS_##amp)                                                        \
  (result AutocastBackend::name params {                                                 \
    const Caster cast(inner(), KILN_AMP_POLICY_##amp, KILN_AMP_TARGET_##amp(args));      \
    const Suspension suspension;                                                         \
    return inner().name(KILN_MAP_EACH(cast, KILN_UNPAREN args));                         \
  })
#define KILN_UNPAREN(...) __VA_ARGS__
#include "kiln/detail/ops.def"
#undef KILN_OP

}  // namespace kiln::autocast
