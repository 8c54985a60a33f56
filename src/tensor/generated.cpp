// The run-time checks of every op whose form column in ops.def names a Tensor method, generated
// from the list: the kinds column is enforced, then the form's own checks, then the backend runs
// the op. Ops of form MANUAL are checked by hand in the family files beside this one.
#include "tensor/common.h"

namespace kiln::detail {

namespace {

constexpr bool kAccepts_F[] = {true, false, false};
constexpr bool kAccepts_I[] = {false, true, false};
constexpr bool kAccepts_B[] = {false, false, true};
constexpr bool kAccepts_FI[] = {true, true, false};
constexpr bool kAccepts_FIB[] = {true, true, true};

// The operand of the accepted kinds, its quantized scheme noted first for Requantize.
void check_kinds(Primitive& p, const bool (&accepts)[3], const char* op, Requantize& requantize) {
  check_kind(p, accepts[0], accepts[1], accepts[2], op, &requantize);
}

// Both operands of the accepted kinds and on one device, brought to one dtype, broadcastable.
Backend& prepare_binary(Primitive& lhs, Primitive& rhs, const bool (&accepts)[3], const char* op,
                        Requantize& requantize) {
  check_kinds(lhs, accepts, op, requantize);
  check_kinds(rhs, accepts, op, requantize);
  Backend& backend = backend_of(lhs, rhs, op);
  promote(lhs, rhs, op);
  if (lhs->shape() != rhs->shape()) broadcast_shape(lhs->shape(), rhs->shape(), op);
  return backend;
}

}  // namespace

#define KILN_CHECKED_UNARY(name, kinds)                  \
  Primitive name(Primitive x) {                          \
    Requantize requantize;                               \
    check_kinds(x, kAccepts_##kinds, #name, requantize); \
    Primitive result = backend_of(x).name(std::move(x)); \
    requantize(result);                                  \
    return result;                                       \
  }
#define KILN_CHECKED_BINARY(name, kinds)                                              \
  Primitive name(Primitive lhs, Primitive rhs) {                                      \
    Requantize requantize;                                                            \
    Backend& backend = prepare_binary(lhs, rhs, kAccepts_##kinds, #name, requantize); \
    Primitive result = backend.name(std::move(lhs), std::move(rhs));                  \
    requantize(result);                                                               \
    return result;                                                                    \
  }
// A comparison's scalar may be of any kind (3 > 2.5 on integers is a question with an answer);
// an arithmetic scalar must fit the tensor's kind.
#define KILN_CHECKED_SCALAR(name, kinds)                        \
  Primitive name(Primitive x, Scalar value) {                   \
    Requantize requantize;                                      \
    check_kinds(x, kAccepts_##kinds, #name, requantize);        \
    check_scalar_fits(x, value, #name);                         \
    Primitive result = backend_of(x).name(std::move(x), value); \
    requantize(result);                                         \
    return result;                                              \
  }
#define KILN_CHECKED_COMPARE_SCALAR(name, kinds)                \
  Primitive name(Primitive x, Scalar value) {                   \
    Requantize requantize;                                      \
    check_kinds(x, kAccepts_##kinds, #name, requantize);        \
    Primitive result = backend_of(x).name(std::move(x), value); \
    requantize(result);                                         \
    return result;                                              \
  }
#define KILN_CHECKED_REDUCE_NONEMPTY(name, kinds)        \
  Primitive name(Primitive x) {                          \
    Requantize requantize;                               \
    check_kinds(x, kAccepts_##kinds, #name, requantize); \
    check_not_empty(x, #name);                           \
    Primitive result = backend_of(x).name(std::move(x)); \
    requantize(result);                                  \
    return result;                                       \
  }
#define KILN_CHECKED_DIM(name, kinds)                         \
  Primitive name(Primitive x, std::int64_t dim) {             \
    Requantize requantize;                                    \
    check_kinds(x, kAccepts_##kinds, #name, requantize);      \
    dim = normalize_dim(dim, x->rank(), #name);               \
    Primitive result = backend_of(x).name(std::move(x), dim); \
    requantize(result);                                       \
    return result;                                            \
  }
#define KILN_CHECKED_DIM_NONEMPTY(name, kinds)                \
  Primitive name(Primitive x, std::int64_t dim) {             \
    Requantize requantize;                                    \
    check_kinds(x, kAccepts_##kinds, #name, requantize);      \
    dim = normalize_dim(dim, x->rank(), #name);               \
    check_dim_not_empty(x, dim, #name);                       \
    Primitive result = backend_of(x).name(std::move(x), dim); \
    requantize(result);                                       \
    return result;                                            \
  }
#define KILN_CHECKED_COMPARE KILN_CHECKED_BINARY
#define KILN_CHECKED_PREDICATE KILN_CHECKED_UNARY
#define KILN_CHECKED_REDUCE KILN_CHECKED_UNARY
#define KILN_CHECKED_MANUAL(name, kinds)

#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  KILN_CHECKED_##form(name, kinds)
#include "kiln/detail/ops.def"
#undef KILN_OP

}  // namespace kiln::detail
