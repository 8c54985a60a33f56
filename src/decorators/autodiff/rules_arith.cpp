// Backward rules of arithmetic: binary ops (gradients summed back over broadcast dims), their
// scalar forms, clamps and matmul.
#include <cmath>

#include "decorators/autodiff/rules.h"

namespace kiln::autodiff {

namespace {

// A binary op recorded with its rule; the rule returns the gradients at the output's shape and
// binary() reduces them to each operand's shape when the op broadcast them.
template <class Forward, class Rule>
Primitive binary(AutodiffBackend& self, const char* op, Primitive lhs, Primitive rhs, Keep keep,
                 Forward forward, Rule rule) {
  if (lhs->shape() == rhs->shape()) {
    // Nothing broadcast (the common case): a smaller node, no shapes to keep.
    return self.record<2>(op, Cost::Elementwise, {std::move(lhs), std::move(rhs)}, keep, forward,
                          rule);
  }
  // Read before the call: argument evaluation order is unspecified and the inputs are moved.
  Shape lhs_shape = lhs->shape();
  Shape rhs_shape = rhs->shape();
  return self.record<2>(op, Cost::Elementwise, {std::move(lhs), std::move(rhs)}, keep, forward,
                        [rule, lhs_shape = std::move(lhs_shape), rhs_shape = std::move(rhs_shape)](
                            BackwardArgs& r, Primitive g) {
                          Grads grads = rule(r, std::move(g));
                          if (grads[0]) grads[0] = reduce_to(r.b, std::move(grads[0]), lhs_shape);
                          if (grads[1]) grads[1] = reduce_to(r.b, std::move(grads[1]), rhs_shape);
                          return grads;
                        });
}

}  // namespace

// ---- binary ops: rule(r, g) gives {d lhs, d rhs} at the output shape ----
#define KILN_BINARY_RULE(name, keep, ...)                                                    \
  Primitive AutodiffBackend::name(Primitive lhs, Primitive rhs) {                            \
    return binary(                                                                           \
        *this, #name, std::move(lhs), std::move(rhs), keep,                                  \
        [](Backend& b, Inputs<2> in) { return b.name(std::move(in[0]), std::move(in[1])); }, \
        [](BackwardArgs& r, Primitive g) -> Grads {                                          \
          [[maybe_unused]] Backend& b = r.b;                                                 \
          return __VA_ARGS__;                                                                \
        });                                                                                  \
  }

KILN_BINARY_RULE(add, kKeepNone, {r.needs(0) ? g : nullptr, r.needs(1) ? g : nullptr})
KILN_BINARY_RULE(sub, kKeepNone, {r.needs(0) ? g : nullptr, r.needs(1) ? b.neg(g) : nullptr})
KILN_BINARY_RULE(mul, kKeepIn0 | kKeepIn1,
                 {r.needs(0) ? b.mul(g, r.in(1)) : nullptr,
                  r.needs(1) ? b.mul(g, r.in(0)) : nullptr})
// d/db (a / b) = -(g / b) * a / b
KILN_BINARY_RULE(div, kKeepIn0 | kKeepIn1, [&]() -> Grads {
  Primitive over_b = b.div(g, r.in(1));
  Primitive db = r.needs(1) ? b.neg(b.div(b.mul(over_b, r.in(0)), r.in(1))) : nullptr;
  return {r.needs(0) ? over_b : nullptr, db};
}())
// a % b = a - floor(a / b) * b
KILN_BINARY_RULE(remainder, kKeepIn0 | kKeepIn1,
                 {r.needs(0) ? g : nullptr,
                  r.needs(1) ? b.neg(b.mul(g, b.floor(b.div(r.in(0), r.in(1))))) : nullptr})
// d/da a^p = p a^(p-1); d/dp a^p = a^p ln a, taken as 0 where a = 0 (as PyTorch does).
KILN_BINARY_RULE(pow, kKeepIn0 | kKeepIn1 | kKeepOut, [&]() -> Grads {
  Primitive a = r.in(0);
  Primitive p = r.in(1);
  Primitive da, dp;
  if (r.needs(0)) {
    Primitive lowered = b.pow(a, b.sub_scalar(p, 1));
    da = b.mul(g, b.mul(p, lowered));
  }
  if (r.needs(1)) {
    Primitive at_zero = b.equal_elem(a, 0);
    dp = b.mul(b.mul(g, r.out()), b.mask_fill(b.log(a), std::move(at_zero), 0));
  }
  return {da, dp};
}())
// atan2(a, b): d/da = b / (a² + b²), d/db = -a / (a² + b²)
KILN_BINARY_RULE(atan2, kKeepIn0 | kKeepIn1, [&]() -> Grads {
  Primitive a = r.in(0);
  Primitive c = r.in(1);
  Primitive scaled = b.div(g, b.add(b.square(a), b.square(c)));
  return {r.needs(0) ? b.mul(scaled, c) : nullptr, r.needs(1) ? b.neg(b.mul(scaled, a)) : nullptr};
}())
// hypot(a, b): d/da = a / out, d/db = b / out
KILN_BINARY_RULE(hypot, kKeepIn0 | kKeepIn1 | kKeepOut, [&]() -> Grads {
  Primitive over = b.div(g, r.out());
  return {r.needs(0) ? b.mul(over, r.in(0)) : nullptr, r.needs(1) ? b.mul(over, r.in(1)) : nullptr};
}())

// maximum / minimum: the gradient goes to the chosen operand, split evenly on ties (PyTorch).
#define KILN_EXTREMUM_RULE(name, strictly)                                                     \
  KILN_BINARY_RULE(name, kKeepIn0 | kKeepIn1, [&]() -> Grads {                                 \
    Primitive a = r.in(0);                                                                     \
    Primitive c = r.in(1);                                                                     \
    Primitive share =                                                                          \
        b.add(as_float(b, b.strictly(a, c), g), scale(b, as_float(b, b.equal(a, c), g), 0.5)); \
    Primitive da = b.mul(g, share);                                                            \
    Primitive dc = r.needs(1) ? b.sub(g, da) : nullptr;                                        \
    return {r.needs(0) ? da : nullptr, dc};                                                    \
  }())
KILN_EXTREMUM_RULE(maximum, greater)
KILN_EXTREMUM_RULE(minimum, lower)
#undef KILN_EXTREMUM_RULE
#undef KILN_BINARY_RULE

// ---- scalar forms: rule(r, g, value) gives d x ----
#define KILN_SCALAR_RULE(name, keep, ...)                                              \
  Primitive AutodiffBackend::name(Primitive x, Scalar value) {                         \
    return record<1>(                                                                  \
        #name, Cost::Elementwise, {std::move(x)}, keep,                                \
        [value](Backend& b, Inputs<1> in) { return b.name(std::move(in[0]), value); }, \
        [value](BackwardArgs& r, Primitive g) -> Grads {                               \
          [[maybe_unused]] Backend& b = r.b;                                           \
          [[maybe_unused]] const double s = value.to_double();                         \
          return {__VA_ARGS__};                                                        \
        });                                                                            \
  }

KILN_SCALAR_RULE(add_scalar, kKeepNone, g)
KILN_SCALAR_RULE(sub_scalar, kKeepNone, g)
KILN_SCALAR_RULE(remainder_scalar, kKeepNone, g)
KILN_SCALAR_RULE(mul_scalar, kKeepNone, scale(b, g, s))
KILN_SCALAR_RULE(div_scalar, kKeepNone, scale(b, g, 1.0 / s))
KILN_SCALAR_RULE(pow_scalar, kKeepIn0,
                 s == 0.0 ? zeros_like(b, g)
                          : b.mul(g, scale(b, b.pow_scalar(r.in(0), s - 1.0), s)))
// The gradient passes where min <= x <= max (PyTorch's convention at the bounds).
KILN_SCALAR_RULE(clamp_min, kKeepIn0, b.mask_fill(g, b.lower_elem(r.in(0), value), 0))
KILN_SCALAR_RULE(clamp_max, kKeepIn0, b.mask_fill(g, b.greater_elem(r.in(0), value), 0))
#undef KILN_SCALAR_RULE

Primitive AutodiffBackend::neg(Primitive x) {
  return record<1>(
      "neg", Cost::Elementwise, {std::move(x)}, kKeepNone,
      [](Backend& b, Inputs<1> in) { return b.neg(std::move(in[0])); },
      [](BackwardArgs& r, Primitive g) -> Grads { return {r.b.neg(std::move(g))}; });
}

Primitive AutodiffBackend::clamp(Primitive x, Scalar min, Scalar max) {
  return record<1>(
      "clamp", Cost::Elementwise, {std::move(x)}, kKeepIn0,
      [min, max](Backend& b, Inputs<1> in) { return b.clamp(std::move(in[0]), min, max); },
      [min, max](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive x = r.in(0);
        Primitive outside = b.logical_or(b.lower_elem(x, min), b.greater_elem(x, max));
        return {b.mask_fill(std::move(g), std::move(outside), 0)};
      });
}

// (..., m, k) @ (..., k, n): d lhs = g @ rhsᵀ, d rhs = lhsᵀ @ g, summed over broadcast batches.
Primitive AutodiffBackend::matmul(Primitive lhs, Primitive rhs) {
  Shape lhs_shape = lhs->shape();
  Shape rhs_shape = rhs->shape();
  return record<2>(
      "matmul", Cost::Stored, {std::move(lhs), std::move(rhs)}, kKeepIn0 | kKeepIn1,
      [](Backend& b, Inputs<2> in) { return b.matmul(std::move(in[0]), std::move(in[1])); },
      [lhs_shape = std::move(lhs_shape), rhs_shape = std::move(rhs_shape)](BackwardArgs& r,
                                                                           Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive dl, dr;
        if (r.needs(0)) dl = reduce_to(b, b.matmul(g, transpose_last(b, r.in(1))), lhs_shape);
        if (r.needs(1)) dr = reduce_to(b, b.matmul(transpose_last(b, r.in(0)), g), rhs_shape);
        return {dl, dr};
      });
}

// Composed of slices, products and cat, each with its rule.
Primitive AutodiffBackend::cross(Primitive lhs, Primitive rhs, std::int64_t dim) {
  return Backend::cross(std::move(lhs), std::move(rhs), dim);
}

}  // namespace kiln::autodiff
