// Every op of ops.def as the fusion decorator runs an op that it does not record: inputs computed
// (their pending groups run), the inner backend runs the op, the result is a computed node.
// Derived mechanically from ops.def; to_device, which changes devices, softmax_cross_entropy,
// whose default is what fuses, and layer_norm_backward, are written out below.
#include "decorators/fusion/fusion_backend.h"
#include "runtime/registry.h"

namespace kiln::fusion {
namespace {

// ---- arguments for the inner backend ----
// The handle is let go before the inner op runs: where it was the last one (a temporary given
// up, as in the autodiff rules), the inner tensor is then the op's alone and may be written in
// place (an 824 MB scatter into a gradient no longer copies it first).
Primitive unwrap(FusionPassthrough& self, Primitive p) {
  Primitive value = self.computed(p);
  p.reset();
  return value;
}
OptionalPrimitive unwrap(FusionPassthrough& self, OptionalPrimitive p) {
  if (!p) return p;
  return self.computed(*p);
}
PrimitiveList unwrap(FusionPassthrough& self, PrimitiveList xs) {
  for (Primitive& x : xs) x = self.computed(x);
  return xs;
}
Device unwrap(FusionPassthrough&, Device device) { return device.without_fusion(); }
template <class T>
T&& unwrap(FusionPassthrough&, T&& value) {
  return std::forward<T>(value);
}

// ---- results, computed nodes ----
Primitive finish(const FusionPassthrough& self, Primitive p) {
  return self.wrap_computed(std::move(p));
}
PrimitivePair finish(const FusionPassthrough& self, PrimitivePair p) {
  return {self.wrap_computed(std::move(p.first)), self.wrap_computed(std::move(p.second))};
}
template <class T>
T finish(const FusionPassthrough&, T value) {
  return value;
}

}  // namespace

#define KILN_FUSION_WRITTEN_OUT_to_device KILN_PROBE
#define KILN_FUSION_WRITTEN_OUT_softmax_cross_entropy KILN_PROBE
#define KILN_FUSION_WRITTEN_OUT_layer_norm_backward KILN_PROBE
#define KILN_FUSION_NOT_0 1
#define KILN_FUSION_NOT_1 0
#define KILN_FUSION_NOT(x) KILN_FUSION_NOT_EXPANDED(x)
#define KILN_FUSION_NOT_EXPANDED(x) KILN_FUSION_NOT_##x
#define KILN_UNWRAP(x) unwrap(*this, std::move(x))
#define KILN_UNPAREN(...) __VA_ARGS__
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  KILN_WHEN(KILN_FUSION_NOT(KILN_IS_PROBE(KILN_FUSION_WRITTEN_OUT_##name)))              \
  (result FusionPassthrough::name params {                                               \
    return finish(*this, inner().name(KILN_MAP_EACH(KILN_UNWRAP, KILN_UNPAREN args)));   \
  })
#include "kiln/detail/ops.def"
#undef KILN_OP
#undef KILN_UNWRAP
#undef KILN_UNPAREN

// The fusion flag changes (the tensor layer comes here for either direction on one device's
// hardware), or the hardware does (the tensor is computed, then moved by its plain backend).
Primitive FusionPassthrough::to_device(Primitive x, Device device) {
  const Device own = this->device();
  if (device == own) return x->device().is_fused() ? x : wrap_computed(std::move(x));
  Primitive plain = computed(x);
  x.reset();
  if (plain->device() == device) return plain;
  const Device target = device.without_fusion();
  if (plain->device() != target)
    plain = backend_for(plain->device()).to_device(std::move(plain), target);
  return device.is_fused() ? wrap_computed(std::move(plain)) : plain;
}

// Recorded as its default's composition, so that its ops fuse: the logits' cast into the
// logsumexp that reads them (one pass, no f32 copy written), the picked logits a gather.
Primitive FusionPassthrough::softmax_cross_entropy(Primitive logits, Primitive target) {
  return Backend::softmax_cross_entropy(std::move(logits), std::move(target));
}

// The inner backend's kernel where it has one (cuda's: one pass over the rows), else the
// default's composition recorded lazily, whose ops fuse as the rule's did before the op existed.
PrimitivePair FusionPassthrough::layer_norm_backward(Primitive x, Primitive gamma, Primitive grad,
                                                     double epsilon) {
  const OpInfo& info = op_info(OpCode::layer_norm_backward);
  const DeviceKind kind = device().kind();
  const bool kernel = (kind == DeviceKind::Cuda && info.cuda_kernel) ||
                      (kind == DeviceKind::Cpu && info.cpu_kernel);
  if (!kernel) {
    return Backend::layer_norm_backward(std::move(x), std::move(gamma), std::move(grad), epsilon);
  }
  return finish(*this,
                inner().layer_norm_backward(computed(x), computed(gamma), computed(grad), epsilon));
}

}  // namespace kiln::fusion
