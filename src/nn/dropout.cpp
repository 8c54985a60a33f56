#include "kiln/nn/dropout.h"

#include "kiln/detail/format.h"

namespace kiln::nn::detail {

void check_dropout_probability(double p) {
  if (!(p >= 0.0 && p <= 1.0)) {
    kiln::detail::fail<InvalidArgument>("Dropout", "probability p = ", p, " is not in [0, 1]");
  }
}

Primitive dropout_mask(const Primitive& x, double p) {
  // Bernoulli(1 - p) keeps an element; the mask is a constant, so it is made untracked on x's
  // device (autodiff included) and only x carries the gradient.
  const Primitive keep = kiln::detail::random(x->shape(), Distribution::bernoulli(1.0 - p),
                                              x->dtype(), x->device(), Kind::Float);
  return kiln::detail::mul_scalar(keep, 1.0 / (1.0 - p));
}

}  // namespace kiln::nn::detail
