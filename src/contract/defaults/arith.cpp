// Defaults of arithmetic: maximum/minimum by selection (NaN propagates), an overflow-safe
// hypot, negation, clamps by masking, and the cross product from components.
#include "contract/defaults/compose.h"

namespace kiln {

using namespace defaults;

namespace {

// Where to take rhs instead of lhs: where take_rhs(lhs, rhs) holds or rhs is NaN (so NaN wins).
Primitive select_extremum(Backend& b, Primitive lhs, Primitive rhs, bool greatest) {
  const Shape shape = broadcast(lhs->shape(), rhs->shape());
  lhs = expand_to(b, std::move(lhs), shape);
  rhs = expand_to(b, std::move(rhs), shape);
  Primitive take_rhs = greatest ? b.lower(lhs, rhs) : b.greater(lhs, rhs);
  if (is_float(rhs->dtype())) take_rhs = b.logical_or(std::move(take_rhs), b.is_nan(rhs));
  return b.mask_where(std::move(lhs), std::move(take_rhs), std::move(rhs));
}

}  // namespace

Primitive Backend::maximum(Primitive lhs, Primitive rhs) {
  return select_extremum(*this, std::move(lhs), std::move(rhs), true);
}

Primitive Backend::minimum(Primitive lhs, Primitive rhs) {
  return select_extremum(*this, std::move(lhs), std::move(rhs), false);
}

Primitive Backend::hypot(Primitive lhs, Primitive rhs) {
  // big * sqrt(1 + (small / big)^2) never overflows where the result fits; infinities win over
  // NaN as in C's hypot, and 0/0 at the origin is replaced by 0.
  const DType dtype = lhs->dtype();
  Primitive a = abs(to_compute(*this, std::move(lhs)));
  Primitive b = abs(to_compute(*this, std::move(rhs)));
  Primitive any_inf = logical_or(is_inf(a), is_inf(b));
  Primitive big = maximum(a, b);
  Primitive small = minimum(std::move(a), std::move(b));
  Primitive ratio = div(std::move(small), big);
  Primitive root = sqrt(add_scalar(square(std::move(ratio)), 1));
  Primitive zero = equal_elem(big, 0);
  Primitive out = mul(std::move(big), std::move(root));
  out = mask_fill(std::move(out), std::move(zero), 0);
  out = mask_fill(std::move(out), std::move(any_inf), kInfinity);
  return from_compute(*this, std::move(out), dtype);
}

Primitive Backend::neg(Primitive x) { return mul_scalar(std::move(x), -1); }

Primitive Backend::clamp_min(Primitive x, Scalar min) {
  // x < min is false for NaN, so NaN stays.
  Primitive below = lower_elem(x, min);
  return mask_fill(std::move(x), std::move(below), min);
}

Primitive Backend::clamp_max(Primitive x, Scalar max) {
  Primitive above = greater_elem(x, max);
  return mask_fill(std::move(x), std::move(above), max);
}

Primitive Backend::clamp(Primitive x, Scalar min, Scalar max) {
  return clamp_max(clamp_min(std::move(x), min), max);
}

Primitive Backend::cross(Primitive lhs, Primitive rhs, std::int64_t dim) {
  // out[i] = a[i+1] b[i+2] - a[i+2] b[i+1] (indices mod 3) along dim.
  const Shape shape = broadcast(lhs->shape(), rhs->shape());
  lhs = expand_to(*this, std::move(lhs), shape);
  rhs = expand_to(*this, std::move(rhs), shape);
  auto component = [&](const Primitive& t, std::int64_t i) {
    return slice_dim(*this, t, dim, i % 3, 1);
  };
  PrimitiveList parts;
  for (std::int64_t i = 0; i < 3; ++i) {
    parts.push_back(sub(mul(component(lhs, i + 1), component(rhs, i + 2)),
                        mul(component(lhs, i + 2), component(rhs, i + 1))));
  }
  return cat(std::move(parts), dim);
}

}  // namespace kiln
