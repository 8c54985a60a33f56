// Dropout: in training (the input on an autodiff device) each element is zeroed with probability
// p and the survivors are scaled by 1 / (1 - p), so the expectation is unchanged; in evaluation
// (a plain device) it is the identity. The mask is drawn from the device's generator, so
// `dev.seed(s)` makes it reproducible.
//
//   nn::Dropout drop{.p = 0.1};
//   auto y = drop.forward(x);   // x on dev.autodiff(): masked; on dev: x itself
#pragma once

#include "kiln/nn/stateless.h"
#include "kiln/tensor.h"

namespace kiln::nn {

namespace detail {
// A mask of 0 and 1 / (1 - p) with x's shape, dtype and device (p in [0, 1); checked).
Primitive dropout_mask(const Primitive& x, double p);
void check_dropout_probability(double p);
}  // namespace detail

struct Dropout {
  double p = 0.5;
  KILN_STATELESS_MODULE

  template <std::size_t D>
  Tensor<D> forward(const Tensor<D>& x) const {
    detail::check_dropout_probability(p);
    if (!x.device().is_autodiff() || p == 0.0) return x;
    // Everything dropped: zeros that stay in the graph (the gradient is zero too).
    if (p == 1.0) return x * 0.0;
    return x * Tensor<D>::from_primitive(detail::dropout_mask(x.primitive(), p));
  }
};

}  // namespace kiln::nn
