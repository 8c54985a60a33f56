// Backward rules of unary maths, one line each: the gradient of x given g = d loss / d out.
// `x` is the saved input, `out` the saved output; each rule keeps only what it reads.
#include <numbers>

#include "decorators/autodiff/rules.h"

namespace kiln::autodiff {

#define KILN_UNARY_RULE(name, keep, ...)                                   \
  Primitive AutodiffBackend::name(Primitive x) {                           \
    return record<1>(                                                      \
        #name, Cost::Elementwise, {std::move(x)}, keep,                    \
        [](Backend& b, Inputs<1> in) { return b.name(std::move(in[0])); }, \
        [](BackwardArgs& r, Primitive g) -> Grads {                        \
          [[maybe_unused]] Backend& b = r.b;                               \
          return {__VA_ARGS__};                                            \
        });                                                                \
  }
#define X r.in(0)
#define OUT r.out()
constexpr Keep kX = kKeepIn0;
constexpr Keep kOut = kKeepOut;

// 1 / sqrt(v)
#define RSQRT(v) b.rsqrt(v)

KILN_UNARY_RULE(abs, kX, b.mul(g, b.sign(X)))
KILN_UNARY_RULE(square, kX, b.mul(g, scale(b, X, 2.0)))
KILN_UNARY_RULE(recip, kOut, b.neg(b.mul(g, b.square(OUT))))
KILN_UNARY_RULE(exp, kOut, b.mul(g, OUT))
KILN_UNARY_RULE(expm1, kOut, b.mul(g, b.add_scalar(OUT, 1.0)))
KILN_UNARY_RULE(exp2, kOut, b.mul(g, scale(b, OUT, std::numbers::ln2)))
KILN_UNARY_RULE(log, kX, b.div(g, X))
KILN_UNARY_RULE(log1p, kX, b.div(g, b.add_scalar(X, 1.0)))
KILN_UNARY_RULE(log2, kX, b.div(g, scale(b, X, std::numbers::ln2)))
KILN_UNARY_RULE(log10, kX, b.div(g, scale(b, X, std::numbers::ln10)))
KILN_UNARY_RULE(sqrt, kOut, b.div(g, scale(b, OUT, 2.0)))
KILN_UNARY_RULE(rsqrt, kX | kOut, b.mul(g, scale(b, b.div(OUT, X), -0.5)))
KILN_UNARY_RULE(sin, kX, b.mul(g, b.cos(X)))
KILN_UNARY_RULE(cos, kX, b.neg(b.mul(g, b.sin(X))))
KILN_UNARY_RULE(tan, kOut, b.mul(g, b.add_scalar(b.square(OUT), 1.0)))
KILN_UNARY_RULE(asin, kX, b.mul(g, RSQRT(b.sub(constant(b, X, 1.0), b.square(X)))))
KILN_UNARY_RULE(acos, kX, b.neg(b.mul(g, RSQRT(b.sub(constant(b, X, 1.0), b.square(X))))))
KILN_UNARY_RULE(atan, kX, b.div(g, b.add_scalar(b.square(X), 1.0)))
KILN_UNARY_RULE(sinh, kX, b.mul(g, b.cosh(X)))
KILN_UNARY_RULE(cosh, kX, b.mul(g, b.sinh(X)))
KILN_UNARY_RULE(tanh, kOut, b.mul(g, b.sub(constant(b, OUT, 1.0), b.square(OUT))))
KILN_UNARY_RULE(asinh, kX, b.mul(g, RSQRT(b.add_scalar(b.square(X), 1.0))))
KILN_UNARY_RULE(acosh, kX, b.mul(g, RSQRT(b.sub_scalar(b.square(X), 1.0))))
KILN_UNARY_RULE(atanh, kX, b.div(g, b.sub(constant(b, X, 1.0), b.square(X))))
// d erf(x) = 2 / sqrt(pi) * exp(-x²)
KILN_UNARY_RULE(erf, kX,
                b.mul(g, scale(b, b.exp(b.neg(b.square(X))), std::numbers::inv_sqrtpi * 2.0)))
// d erfinv(y) = sqrt(pi) / 2 * exp(erfinv(y)²)
KILN_UNARY_RULE(erfinv, kOut,
                b.mul(g, scale(b, b.exp(b.square(OUT)), 0.5 / std::numbers::inv_sqrtpi)))
// Piecewise constant: the gradient is zero almost everywhere (PyTorch gives zeros too).
KILN_UNARY_RULE(sign, kKeepNone, zeros_like(b, g))
KILN_UNARY_RULE(round, kKeepNone, zeros_like(b, g))
KILN_UNARY_RULE(floor, kKeepNone, zeros_like(b, g))
KILN_UNARY_RULE(ceil, kKeepNone, zeros_like(b, g))
KILN_UNARY_RULE(trunc, kKeepNone, zeros_like(b, g))

#undef RSQRT
#undef OUT
#undef X
#undef KILN_UNARY_RULE

}  // namespace kiln::autodiff
