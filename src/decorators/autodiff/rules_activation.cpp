// Backward rules of activations. The hot ones (relu, gelu, sigmoid) hand their gradient to the
// backend's fused *_backward ops, which have rules of their own here so second derivatives
// work. The softmax family and the rules of 16-bit inputs compute in f32, as the forward does.
#include <cmath>
#include <numbers>

#include "decorators/autodiff/rules.h"

namespace kiln::autodiff {

using defaults::from_compute;
using defaults::to_compute;

namespace {

// An elementwise op of one input: rule(r, g) gives d x.
template <class Forward, class Rule>
Primitive unary(AutodiffBackend& self, const char* op, Primitive x, Keep keep, Forward forward,
                Rule rule) {
  return self.record<1>(
      op, Cost::Elementwise, {std::move(x)}, keep, forward,
      [rule](BackwardArgs& r, Primitive g) -> Grads { return {rule(r, std::move(g))}; });
}

// The standard normal density exp(-x² / 2) / sqrt(2 pi).
Primitive normal_density(Backend& b, const Primitive& x) {
  return scale(b, b.exp(scale(b, b.square(x), -0.5)),
               0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
}

}  // namespace

// ---- relu ------------------------------------------------------------------------------------

// The output says where the gradient passes (out > 0), so the input need not be kept.
Primitive AutodiffBackend::relu(Primitive x) {
  return unary(
      *this, "relu", std::move(x), kKeepOut,
      [](Backend& b, Inputs<1> in) { return b.relu(std::move(in[0])); },
      [](BackwardArgs& r, Primitive g) { return r.b.relu_backward(r.out(), std::move(g)); });
}

// Linear in grad; piecewise constant in output (its derivative is zero almost everywhere).
Primitive AutodiffBackend::relu_backward(Primitive output, Primitive grad) {
  return record<2>(
      "relu_backward", Cost::Elementwise, {std::move(output), std::move(grad)}, kKeepIn0,
      [](Backend& b, Inputs<2> in) { return b.relu_backward(std::move(in[0]), std::move(in[1])); },
      [](BackwardArgs& r, Primitive g) -> Grads {
        return {nullptr, r.needs(1) ? r.b.relu_backward(r.in(0), std::move(g)) : nullptr};
      });
}

Primitive AutodiffBackend::leaky_relu(Primitive x, Scalar negative_slope) {
  return unary(
      *this, "leaky_relu", std::move(x), kKeepIn0,
      [negative_slope](Backend& b, Inputs<1> in) {
        return b.leaky_relu(std::move(in[0]), negative_slope);
      },
      [negative_slope](BackwardArgs& r, Primitive g) {
        Backend& b = r.b;
        Primitive negative = b.lower_elem(r.in(0), 0);
        Primitive scaled = b.mul_scalar(g, negative_slope);
        return b.mask_where(std::move(g), std::move(negative), std::move(scaled));
      });
}

// alpha broadcasts against x: its gradient sums over the broadcast dims.
Primitive AutodiffBackend::prelu(Primitive x, Primitive alpha) {
  Shape alpha_shape = alpha->shape();  // before alpha is moved into the call
  return record<2>(
      "prelu", Cost::Elementwise, {std::move(x), std::move(alpha)}, kKeepIn0 | kKeepIn1,
      [](Backend& b, Inputs<2> in) { return b.prelu(std::move(in[0]), std::move(in[1])); },
      [alpha_shape = std::move(alpha_shape)](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive x = r.in(0);
        Primitive negative = b.lower_elem(x, 0);
        Primitive dx, dalpha;
        if (r.needs(1)) {
          Primitive at_negative = b.mask_fill(b.mul(g, x), b.logical_not(negative), 0);
          dalpha = reduce_to(b, std::move(at_negative), alpha_shape);
        }
        if (r.needs(0)) {
          Primitive scaled = b.mul(g, r.in(1));
          dx = b.mask_where(std::move(g), std::move(negative), std::move(scaled));
        }
        return {dx, dalpha};
      });
}

// ---- gelu ------------------------------------------------------------------------------------

Primitive AutodiffBackend::gelu(Primitive x) {
  return unary(
      *this, "gelu", std::move(x), kKeepIn0,
      [](Backend& b, Inputs<1> in) { return b.gelu(std::move(in[0])); },
      [](BackwardArgs& r, Primitive g) { return r.b.gelu_backward(r.in(0), std::move(g)); });
}

// gelu_backward(x, h) = h * (Phi(x) + x phi(x)). d/dh is gelu_backward again; d/dx is
// h * phi(x) (2 - x²), whose limit at +-inf is 0 (not 0 * inf = NaN).
Primitive AutodiffBackend::gelu_backward(Primitive x, Primitive grad) {
  return record<2>(
      "gelu_backward", Cost::Elementwise, {std::move(x), std::move(grad)}, kKeepIn0 | kKeepIn1,
      [](Backend& b, Inputs<2> in) { return b.gelu_backward(std::move(in[0]), std::move(in[1])); },
      [](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive dx, dh;
        if (r.needs(0)) {
          const DType dtype = g->dtype();
          // Past |x| = 40 the density is 0 in every dtype; clamping there keeps x² finite.
          Primitive x = b.clamp(to_compute(b, r.in(0)), -40.0, 40.0);
          Primitive curvature =
              b.mul(normal_density(b, x), b.sub(constant(b, x, 2.0), b.square(x)));
          Primitive product = b.mul(to_compute(b, g), to_compute(b, r.in(1)));
          dx = from_compute(b, b.mul(std::move(product), std::move(curvature)), dtype);
        }
        if (r.needs(1)) dh = b.gelu_backward(r.in(0), std::move(g));
        return {dx, dh};
      });
}

// ---- sigmoid family ----------------------------------------------------------------------------

Primitive AutodiffBackend::sigmoid(Primitive x) {
  return unary(
      *this, "sigmoid", std::move(x), kKeepOut,
      [](Backend& b, Inputs<1> in) { return b.sigmoid(std::move(in[0])); },
      [](BackwardArgs& r, Primitive g) { return r.b.sigmoid_backward(r.out(), std::move(g)); });
}

// sigmoid_backward(s, h) = h s (1 - s): d/dh is sigmoid_backward again, d/ds = h (1 - 2 s).
Primitive AutodiffBackend::sigmoid_backward(Primitive output, Primitive grad) {
  return record<2>(
      "sigmoid_backward", Cost::Elementwise, {std::move(output), std::move(grad)},
      kKeepIn0 | kKeepIn1,
      [](Backend& b, Inputs<2> in) {
        return b.sigmoid_backward(std::move(in[0]), std::move(in[1]));
      },
      [](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive ds, dh;
        if (r.needs(0)) {
          Primitive s = r.in(0);
          Primitive slope = b.sub(constant(b, s, 1.0), scale(b, s, 2.0));
          ds = b.mul(b.mul(g, r.in(1)), std::move(slope));
        }
        if (r.needs(1)) dh = b.sigmoid_backward(r.in(0), std::move(g));
        return {ds, dh};
      });
}

// d/dx x s(x) = s (1 + x (1 - s)).
Primitive AutodiffBackend::silu(Primitive x) {
  return unary(
      *this, "silu", std::move(x), kKeepIn0,
      [](Backend& b, Inputs<1> in) { return b.silu(std::move(in[0])); },
      [](BackwardArgs& r, Primitive g) {
        Backend& b = r.b;
        Primitive x = r.in(0);
        Primitive s = b.sigmoid(x);
        Primitive slope = b.add_scalar(b.mul(x, b.sub(constant(b, s, 1.0), s)), 1.0);
        return b.mul(std::move(g), b.mul(std::move(s), std::move(slope)));
      });
}

// clamp(alpha x + beta, 0, 1): slope alpha strictly inside the band, 0 on the flat parts.
Primitive AutodiffBackend::hard_sigmoid(Primitive x, Scalar alpha, Scalar beta) {
  return unary(
      *this, "hard_sigmoid", std::move(x), kKeepIn0,
      [alpha, beta](Backend& b, Inputs<1> in) {
        return b.hard_sigmoid(std::move(in[0]), alpha, beta);
      },
      [alpha, beta](BackwardArgs& r, Primitive g) {
        Backend& b = r.b;
        Primitive t = b.add_scalar(b.mul_scalar(r.in(0), alpha), beta);
        Primitive flat = b.logical_or(b.lower_equal_elem(t, 0), b.greater_equal_elem(t, 1));
        return b.mask_fill(b.mul_scalar(std::move(g), alpha), std::move(flat), 0);
      });
}

// d/dx log s(x) = 1 - s(x) = s(-x).
Primitive AutodiffBackend::log_sigmoid(Primitive x) {
  return unary(
      *this, "log_sigmoid", std::move(x), kKeepIn0,
      [](Backend& b, Inputs<1> in) { return b.log_sigmoid(std::move(in[0])); },
      [](BackwardArgs& r, Primitive g) {
        return r.b.mul(std::move(g), r.b.sigmoid(r.b.neg(r.in(0))));
      });
}

// ---- softmax family (rules from the output along dim) ---------------------------------------

// softmax: dx = y (g - sum(g y)).
Primitive AutodiffBackend::softmax(Primitive x, std::int64_t dim) {
  return unary(
      *this, "softmax", std::move(x), kKeepOut,
      [dim](Backend& b, Inputs<1> in) { return b.softmax(std::move(in[0]), dim); },
      [dim](BackwardArgs& r, Primitive g) {
        Backend& b = r.b;
        const DType dtype = g->dtype();
        Primitive y = to_compute(b, r.out());
        Primitive gc = to_compute(b, std::move(g));
        Primitive dot = b.sum_dim(b.mul(gc, y), dim);
        return from_compute(b, b.mul(std::move(y), b.sub(std::move(gc), std::move(dot))), dtype);
      });
}

// log_softmax: dx = g - exp(y) sum(g).
Primitive AutodiffBackend::log_softmax(Primitive x, std::int64_t dim) {
  return unary(
      *this, "log_softmax", std::move(x), kKeepOut,
      [dim](Backend& b, Inputs<1> in) { return b.log_softmax(std::move(in[0]), dim); },
      [dim](BackwardArgs& r, Primitive g) {
        Backend& b = r.b;
        const DType dtype = g->dtype();
        Primitive gc = to_compute(b, std::move(g));
        Primitive total = b.sum_dim(gc, dim);
        Primitive p = b.exp(to_compute(b, r.out()));
        return from_compute(b, b.sub(std::move(gc), b.mul(std::move(p), std::move(total))), dtype);
      });
}

// loss = logsumexp(x) - x[t] per row: dx = (softmax(x) - onehot(t)) g, in the compute dtype.
// Only the logits are kept (they exist anyway); the row's logsumexp is the loss plus the picked
// logit, so the backward is one elementwise pass over the logits, fused where fusion is on. The
// one-hot is either compared in that pass (a [1, classes] arange against the targets) or, for
// large logits, left out of it and each row's target value scattered over the pass's result
// afterwards (in place: that result is the scatter's alone). The compare is a 64-bit load and
// compare per element and holds a GPU's vectors to 8 bytes of bf16 (GPT-2's 8192 x 50304 logits);
// the scatter is two more small launches, which a step of small logits (an MLP's 128 x 10) would
// notice. Both give the same bits: the target's value is the same operations with a 1.
constexpr std::int64_t kScatteredTargetElements = std::int64_t{1} << 20;

Primitive AutodiffBackend::softmax_cross_entropy(Primitive logits, Primitive target) {
  Primitive index = inner_of(target);
  return record<1>(
      "softmax_cross_entropy", Cost::Stored, {std::move(logits)}, kKeepIn0 | kKeepOut,
      [index](Backend& b, Inputs<1> in) {
        return b.softmax_cross_entropy(std::move(in[0]), index);
      },
      [index](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive x = r.in(0);
        const DType dtype = x->dtype();
        const std::int64_t rows = x->shape()[0], classes = x->shape()[1];
        if (rows == 0) return {b.zeros(x->shape(), dtype, x->device())};
        Primitive column = b.reshape(index, Shape{rows, 1});
        Primitive picked = to_compute(b, b.gather(1, x, column));
        Primitive total = b.add(b.reshape(r.out(), Shape{rows, 1}), picked);
        Primitive scale = b.reshape(std::move(g), Shape{rows, 1});
        if (rows * classes < kScatteredTargetElements) {
          Primitive p = b.exp(b.sub(to_compute(b, x), std::move(total)));
          Primitive classes_row =
              b.reshape(b.arange(0, classes, 1, index->dtype(), x->device()), Shape{1, classes});
          Primitive hot = b.cast(b.equal(std::move(classes_row), std::move(column)), p->dtype());
          return {
              from_compute(b, b.mul(b.sub(std::move(p), std::move(hot)), std::move(scale)), dtype)};
        }
        // (exp(x_t - total) - 1) g at the target's column.
        Primitive at_target = from_compute(
            b, b.mul(b.sub_scalar(b.exp(b.sub(std::move(picked), total)), Scalar(1.0)), scale),
            dtype);
        Primitive p = b.exp(b.sub(to_compute(b, x), std::move(total)));
        Primitive rest = from_compute(b, b.mul(std::move(p), std::move(scale)), dtype);
        return {b.scatter(1, std::move(rest), std::move(column), std::move(at_target),
                          IndexingUpdate::Assign)};
      });
}

// softmin(x) = softmax(-x): dx = y (sum(g y) - g).
Primitive AutodiffBackend::softmin(Primitive x, std::int64_t dim) {
  return unary(
      *this, "softmin", std::move(x), kKeepOut,
      [dim](Backend& b, Inputs<1> in) { return b.softmin(std::move(in[0]), dim); },
      [dim](BackwardArgs& r, Primitive g) {
        Backend& b = r.b;
        const DType dtype = g->dtype();
        Primitive y = to_compute(b, r.out());
        Primitive gc = to_compute(b, std::move(g));
        Primitive dot = b.sum_dim(b.mul(gc, y), dim);
        return from_compute(b, b.mul(std::move(y), b.sub(std::move(dot), std::move(gc))), dtype);
      });
}

}  // namespace kiln::autodiff
