// Backward rules of movement and conversion: the gradient goes back to where the value came
// from, in the dtype it came in.
#include "decorators/autodiff/rules.h"

namespace kiln::autodiff {
namespace {

// device in the form backend b works with (b is the autodiff backend under create_graph).
Device device_for(Backend& b, const Device& device) {
  return b.autodiff_enabled() ? device.autodiff() : device.without_autodiff();
}

}  // namespace

Primitive AutodiffBackend::to_device(Primitive x, Device device) {
  if (!device.is_autodiff()) {
    // Leaving autodiff: the plain tensor is a detached copy of the values.
    Primitive plain = take_inner(std::move(x));
    if (plain->device() == device) return plain;
    return backend_for(plain->device()).to_device(std::move(plain), device);
  }
  if (x->device().same_hardware(device)) {
    return is_autodiff(x) ? x : wrap(std::move(x));
  }
  const Device source = x->device();
  return record<1>(
      "to_device", Cost::Stored, {std::move(x)}, kKeepNone,
      [device](Backend& b, Inputs<1> in) {
        return b.to_device(std::move(in[0]), device_for(b, device));
      },
      [source](BackwardArgs& r, Primitive g) -> Grads {
        return {r.b.to_device(std::move(g), device_for(r.b, source))};
      });
}

Primitive AutodiffBackend::cast(Primitive x, DType dtype) {
  if (!is_float(dtype) || !is_float(x->dtype())) {
    // To or from another kind: no gradient crosses a kind boundary.
    return AutodiffPassthrough::cast(std::move(x), dtype);
  }
  const DType source = x->dtype();
  return record<1>(
      "cast", Cost::Elementwise, {std::move(x)}, kKeepNone,
      [dtype](Backend& b, Inputs<1> in) { return b.cast(std::move(in[0]), dtype); },
      [source](BackwardArgs& r, Primitive g) -> Grads { return {r.b.cast(std::move(g), source)}; });
}

}  // namespace kiln::autodiff
