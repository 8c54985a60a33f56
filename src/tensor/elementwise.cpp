// Elementwise ops: arithmetic, unary math, comparisons, logic, bitwise, clamp.
#include "tensor/common.h"

namespace kiln::detail {

namespace {

void check_broadcast(const Primitive& a, const Primitive& b, const char* op) {
  if (a->shape() == b->shape()) return;
  broadcast_shape(a->shape(), b->shape(), op);
}

// Checks kinds, devices, dtypes and shapes of a binary op and returns its backend.
Backend& prepare_binary(Primitive& lhs, Primitive& rhs, bool float_ok, bool int_ok, bool bool_ok,
                        const char* op) {
  check_kind(lhs, float_ok, int_ok, bool_ok, op);
  check_kind(rhs, float_ok, int_ok, bool_ok, op);
  Backend& backend = backend_of(lhs, rhs, op);
  promote(lhs, rhs, op);
  check_broadcast(lhs, rhs, op);
  return backend;
}

}  // namespace

#define KILN_BINARY(name, float_ok, int_ok, bool_ok)                     \
  Primitive name(Primitive lhs, Primitive rhs) {                         \
    Backend& b = prepare_binary(lhs, rhs, float_ok, int_ok, bool_ok, #name); \
    return b.name(std::move(lhs), std::move(rhs));                       \
  }
#define KILN_SCALAR_CHECKED(name, float_ok, int_ok, bool_ok, fits)  \
  Primitive name(Primitive x, Scalar value) {                        \
    check_kind(x, float_ok, int_ok, bool_ok, #name);                 \
    if (fits) check_scalar_fits(x, value, #name);                    \
    return backend_of(x).name(std::move(x), value);                  \
  }
#define KILN_SCALAR(name, f, i, b) KILN_SCALAR_CHECKED(name, f, i, b, true)
#define KILN_UNARY(name, float_ok, int_ok, bool_ok) \
  Primitive name(Primitive x) {                     \
    check_kind(x, float_ok, int_ok, bool_ok, #name); \
    return backend_of(x).name(std::move(x));        \
  }

#define KILN_NUMERIC_BINARY(name) \
  KILN_BINARY(name, true, true, false) KILN_SCALAR(name##_scalar, true, true, false)
KILN_NUMERIC_BINARY_OPS(KILN_NUMERIC_BINARY)
#undef KILN_NUMERIC_BINARY
KILN_BINARY(maximum, true, true, false)
KILN_BINARY(minimum, true, true, false)
KILN_BINARY(atan2, true, false, false)
KILN_BINARY(hypot, true, false, false)

#define KILN_FLOAT_UNARY(name) KILN_UNARY(name, true, false, false)
KILN_FLOAT_UNARY_OPS(KILN_FLOAT_UNARY)
#undef KILN_FLOAT_UNARY
#define KILN_NUMERIC_UNARY(name) KILN_UNARY(name, true, true, false)
KILN_NUMERIC_UNARY_OPS(KILN_NUMERIC_UNARY)
#undef KILN_NUMERIC_UNARY
KILN_UNARY(is_nan, true, false, false)
KILN_UNARY(is_inf, true, false, false)
KILN_UNARY(logical_not, false, false, true)
KILN_UNARY(bitwise_not, false, true, false)

#define KILN_COMPARE(name, float_ok, int_ok, bool_ok) \
  KILN_BINARY(name, float_ok, int_ok, bool_ok)       \
  KILN_SCALAR_CHECKED(name##_elem, float_ok, int_ok, bool_ok, false)
KILN_COMPARE(equal, true, true, true)
KILN_COMPARE(not_equal, true, true, true)
KILN_COMPARE(greater, true, true, false)
KILN_COMPARE(greater_equal, true, true, false)
KILN_COMPARE(lower, true, true, false)
KILN_COMPARE(lower_equal, true, true, false)
#undef KILN_COMPARE

#define KILN_LOGICAL(name) KILN_BINARY(name, false, false, true)
KILN_LOGICAL_BINARY_OPS(KILN_LOGICAL)
#undef KILN_LOGICAL
#define KILN_BITWISE(name) \
  KILN_BINARY(name, false, true, false) KILN_SCALAR(name##_scalar, false, true, false)
KILN_BITWISE_BINARY_OPS(KILN_BITWISE)
#undef KILN_BITWISE

#undef KILN_BINARY
#undef KILN_SCALAR
#undef KILN_SCALAR_CHECKED
#undef KILN_UNARY

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
