// clamp: the tensor layer's one elementwise op of form MANUAL (the others are generated from
// ops.def in generated.cpp); its bounds are optional and pick one of three backend ops.
#include "tensor/common.h"

namespace kiln::detail {

Primitive clamp(Primitive x, std::optional<Scalar> min, std::optional<Scalar> max) {
  check_numeric(x, "clamp");
  if (min) check_scalar_fits(x, *min, "clamp");
  if (max) check_scalar_fits(x, *max, "clamp");
  Backend& backend = backend_of(x);
  if (min && max) return backend.clamp(std::move(x), *min, *max);
  if (min) return backend.clamp_min(std::move(x), *min);
  if (max) return backend.clamp_max(std::move(x), *max);
  return x;
}

}  // namespace kiln::detail
