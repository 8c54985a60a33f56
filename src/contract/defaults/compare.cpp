// Defaults of comparisons, logic and bitwise ops with a scalar, composed of their basic forms.
#include "contract/defaults/compose.h"

namespace kiln {

using namespace defaults;

Primitive Backend::not_equal(Primitive lhs, Primitive rhs) {
  return logical_not(equal(std::move(lhs), std::move(rhs)));
}

Primitive Backend::not_equal_elem(Primitive x, Scalar value) {
  return logical_not(equal_elem(std::move(x), value));
}

// NaN is the only value not equal to itself.
Primitive Backend::is_nan(Primitive x) { return not_equal(x, x); }

Primitive Backend::is_inf(Primitive x) { return equal_elem(abs(std::move(x)), kInfinity); }

Primitive Backend::logical_xor(Primitive lhs, Primitive rhs) {
  return not_equal(std::move(lhs), std::move(rhs));
}

// The scalar becomes a broadcasting constant of x's dtype, so it converts exactly as the
// tensor-tensor op would see it.
#define KILN_DEFAULT_BITWISE_SCALAR(name)                       \
  Primitive Backend::name##_scalar(Primitive x, Scalar value) { \
    Primitive constant = constant_like(*this, x, value);        \
    return name(std::move(x), std::move(constant));             \
  }
KILN_DEFAULT_BITWISE_SCALAR(bitwise_and)
KILN_DEFAULT_BITWISE_SCALAR(bitwise_or)
KILN_DEFAULT_BITWISE_SCALAR(bitwise_xor)
KILN_DEFAULT_BITWISE_SCALAR(bitwise_left_shift)
KILN_DEFAULT_BITWISE_SCALAR(bitwise_right_shift)
#undef KILN_DEFAULT_BITWISE_SCALAR

}  // namespace kiln
