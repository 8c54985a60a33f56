// Defaults of unary math, each written to keep full precision (expm1 near 0, exp2 through pow).
#include <cmath>
#include <numbers>

#include "contract/defaults/compose.h"

namespace kiln {

using namespace defaults;

Primitive Backend::sign(Primitive x) {
  const DType dtype = x->dtype();
  Primitive positive = cast(greater_elem(x, 0), dtype);
  Primitive negative = cast(lower_elem(x, 0), dtype);
  Primitive out = sub(std::move(positive), std::move(negative));
  if (is_float(dtype)) out = mask_fill(std::move(out), is_nan(x), std::nan(""));
  return out;
}

Primitive Backend::square(Primitive x) { return mul(x, x); }

Primitive Backend::expm1(Primitive x) {
  // exp(x) - 1 cancels for small |x|; there 2 t / (1 - t) with t = tanh(x / 2) is exact to a
  // few ulps. Away from 0 the subtraction loses at most a couple of bits.
  const DType dtype = x->dtype();
  x = to_compute(*this, std::move(x));
  Primitive t = tanh(mul_scalar(x, 0.5));
  Primitive near_zero = lower_elem(abs(x), 0.5);
  Primitive small = div(mul_scalar(t, 2), sub(constant_like(*this, t, 1), t));
  Primitive large = sub_scalar(exp(std::move(x)), 1);
  return from_compute(*this, mask_where(std::move(large), std::move(near_zero), std::move(small)),
                      dtype);
}

Primitive Backend::exp2(Primitive x) {
  Primitive two = constant_like(*this, x, 2);
  return pow(std::move(two), std::move(x));
}

Primitive Backend::log2(Primitive x) { return mul_scalar(log(std::move(x)), std::numbers::log2e); }

Primitive Backend::log10(Primitive x) {
  return mul_scalar(log(std::move(x)), std::numbers::log10e);
}

Primitive Backend::rsqrt(Primitive x) { return recip(sqrt(std::move(x))); }

}  // namespace kiln
