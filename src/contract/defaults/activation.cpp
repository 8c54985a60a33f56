// Defaults of activations, numerically stable over the whole float range: sigmoid and
// log_sigmoid never exponentiate a positive number, softmax subtracts the row maximum, and the
// limits at -inf (gelu, silu -> 0) are exact rather than -inf * 0 = NaN.
#include <cmath>
#include <numbers>

#include "contract/defaults/compose.h"

namespace kiln {

using namespace defaults;

Primitive Backend::relu(Primitive x) {
  Primitive negative = lower_equal_elem(x, 0);  // false for NaN, which passes through
  return mask_fill(std::move(x), std::move(negative), 0);
}

Primitive Backend::relu_backward(Primitive output, Primitive grad) {
  return mask_fill(std::move(grad), lower_equal_elem(std::move(output), 0), 0);
}

Primitive Backend::leaky_relu(Primitive x, Scalar negative_slope) {
  Primitive negative = lower_elem(x, 0);
  Primitive scaled = mul_scalar(x, negative_slope);
  return mask_where(std::move(x), std::move(negative), std::move(scaled));
}

Primitive Backend::prelu(Primitive x, Primitive alpha) {
  // alpha broadcasts against x; the result has x's shape.
  const Shape shape = x->shape();
  Primitive negative = lower_elem(x, 0);
  Primitive scaled = mul(x, expand_to(*this, std::move(alpha), shape));
  return mask_where(std::move(x), std::move(negative), std::move(scaled));
}

Primitive Backend::gelu(Primitive x) {
  // x * Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2.
  const DType dtype = x->dtype();
  x = to_compute(*this, std::move(x));
  Primitive phi = mul_scalar(add_scalar(erf(mul_scalar(x, std::numbers::sqrt2 / 2)), 1), 0.5);
  Primitive at_minus_inf = equal_elem(x, -kInfinity);
  Primitive out = mul(std::move(x), std::move(phi));
  return from_compute(*this, mask_fill(std::move(out), std::move(at_minus_inf), 0), dtype);
}

Primitive Backend::gelu_backward(Primitive x, Primitive grad) {
  // d/dx x Phi(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi); x phi(x) -> 0 at +-inf.
  const DType dtype = grad->dtype();
  x = to_compute(*this, std::move(x));
  Primitive phi_cdf = mul_scalar(add_scalar(erf(mul_scalar(x, std::numbers::sqrt2 / 2)), 1), 0.5);
  Primitive density = mul_scalar(exp(mul_scalar(square(x), -0.5)),
                                 0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
  Primitive infinite = is_inf(x);
  Primitive tail = mask_fill(mul(std::move(x), std::move(density)), std::move(infinite), 0);
  Primitive derivative = add(std::move(phi_cdf), std::move(tail));
  Primitive out = mul(to_compute(*this, std::move(grad)), std::move(derivative));
  return from_compute(*this, std::move(out), dtype);
}

Primitive Backend::sigmoid(Primitive x) {
  // With e = exp(-|x|) <= 1: 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0.
  const DType dtype = x->dtype();
  x = to_compute(*this, std::move(x));
  Primitive e = exp(neg(abs(x)));
  Primitive denominator = add_scalar(e, 1);
  Primitive negative = lower_elem(std::move(x), 0);
  Primitive positive_branch = recip(denominator);
  Primitive negative_branch = div(std::move(e), std::move(denominator));
  return from_compute(
      *this,
      mask_where(std::move(positive_branch), std::move(negative), std::move(negative_branch)),
      dtype);
}

Primitive Backend::sigmoid_backward(Primitive output, Primitive grad) {
  // s' = s (1 - s), written from the forward output.
  Primitive complement = sub(constant_like(*this, output, 1), output);
  return mul(std::move(grad), mul(std::move(output), std::move(complement)));
}

Primitive Backend::silu(Primitive x) {
  Primitive at_minus_inf = equal_elem(x, -kInfinity);
  Primitive out = mul(x, sigmoid(x));
  return mask_fill(std::move(out), std::move(at_minus_inf), 0);
}

Primitive Backend::hard_sigmoid(Primitive x, Scalar alpha, Scalar beta) {
  return clamp(add_scalar(mul_scalar(std::move(x), alpha), beta), 0, 1);
}

Primitive Backend::log_sigmoid(Primitive x) {
  // log sigmoid(x) = min(x, 0) - log1p(exp(-|x|)): no overflow on either side.
  const DType dtype = x->dtype();
  x = to_compute(*this, std::move(x));
  Primitive soft = log1p(exp(neg(abs(x))));
  return from_compute(*this, sub(clamp_max(std::move(x), 0), std::move(soft)), dtype);
}

namespace {

// x - max(x) along dim, in the compute dtype: every exponent is <= 0.
Primitive shifted(Backend& b, Primitive x, std::int64_t dim) {
  Primitive top = b.max_dim(x, dim);
  return b.sub(std::move(x), std::move(top));
}

}  // namespace

Primitive Backend::softmax(Primitive x, std::int64_t dim) {
  if (x->shape().num_elements() == 0) return x;
  const DType dtype = x->dtype();
  Primitive e = exp(shifted(*this, to_compute(*this, std::move(x)), dim));
  Primitive total = sum_dim(e, dim);
  return from_compute(*this, div(std::move(e), std::move(total)), dtype);
}

Primitive Backend::log_softmax(Primitive x, std::int64_t dim) {
  if (x->shape().num_elements() == 0) return x;
  const DType dtype = x->dtype();
  Primitive s = shifted(*this, to_compute(*this, std::move(x)), dim);
  Primitive log_total = log(sum_dim(exp(s), dim));
  return from_compute(*this, sub(std::move(s), std::move(log_total)), dtype);
}

Primitive Backend::softmin(Primitive x, std::int64_t dim) {
  return softmax(neg(std::move(x)), dim);
}

// logsumexp(row) - row[target]: the logits' one read is the logsumexp's (its cast to the compute
// dtype fuses into it where fusion is on), the picked logits a gather of one per row.
Primitive Backend::softmax_cross_entropy(Primitive logits, Primitive target) {
  const std::int64_t rows = logits->shape()[0];
  const DType compute = compute_dtype(logits->dtype());
  if (rows == 0) return zeros(Shape{0}, compute, logits->device());
  Primitive column = reshape(std::move(target), Shape{rows, 1});
  Primitive picked = to_compute(*this, gather(1, logits, std::move(column)));
  Primitive total = logsumexp_dim(to_compute(*this, std::move(logits)), 1);
  // A row holding +inf has no distribution: NaN, as log_softmax (and PyTorch) give, not inf.
  Primitive no_distribution = sub(total, total);
  return reshape(add(sub(std::move(total), std::move(picked)), std::move(no_distribution)),
                 Shape{rows});
}

}  // namespace kiln
