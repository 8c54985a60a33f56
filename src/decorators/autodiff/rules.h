// Building blocks of backward rules. Every helper calls ops on the Backend it is given, so a rule
// runs on the inner backend, or on the autodiff backend when the backward pass is recorded.
#pragma once

#include <utility>

#include "contract/defaults/compose.h"
#include "decorators/autodiff/autodiff_backend.h"

namespace kiln::autodiff {

// A constant of like's rank (all dims 1), dtype and device, broadcasting against like.
inline Primitive constant(Backend& b, const Primitive& like, double value) {
  return defaults::constant_like(b, like, value);
}

// Zeros of like's shape, dtype and device.
inline Primitive zeros_like(Backend& b, const Primitive& like) {
  return b.zeros(like->shape(), like->dtype(), like->device());
}

// 1 where mask is true, 0 elsewhere, in like's dtype.
inline Primitive as_float(Backend& b, Primitive mask, const Primitive& like) {
  return b.cast(std::move(mask), like->dtype());
}

// x with its last two dims swapped (the transpose of a batch of matrices).
inline Primitive transpose_last(Backend& b, Primitive x) {
  const auto rank = static_cast<std::int64_t>(x->rank());
  return b.swap_dims(std::move(x), rank - 2, rank - 1);
}

// g * value (a scalar).
inline Primitive scale(Backend& b, Primitive g, double value) {
  return b.mul_scalar(std::move(g), value);
}

}  // namespace kiln::autodiff
