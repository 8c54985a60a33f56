// Activation functions: kiln::activation::relu(x), softmax(x, dim), ...
#pragma once

#include "kiln/tensor.h"

namespace kiln::activation {

template <std::size_t D>
Tensor<D> relu(const Tensor<D>& x) {
  return Tensor<D>::wrap(detail::relu(x.primitive()));
}
// Exact (erf) GELU.
template <std::size_t D>
Tensor<D> gelu(const Tensor<D>& x) {
  return Tensor<D>::wrap(detail::gelu(x.primitive()));
}
// GELU's tanh form (PyTorch's approximate="tanh", transformers' gelu_new and
// gelu_pytorch_tanh): 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). Composed of elementwise
// ops, so a fused device runs it as one kernel.
template <std::size_t D>
Tensor<D> gelu_tanh(const Tensor<D>& x) {
  const Tensor<D> inner = (x * x * x * 0.044715 + x) * 0.7978845608028654;
  return (inner.tanh() + 1.0) * x * 0.5;
}
template <std::size_t D>
Tensor<D> silu(const Tensor<D>& x) {
  return Tensor<D>::wrap(detail::silu(x.primitive()));
}
template <std::size_t D>
Tensor<D> sigmoid(const Tensor<D>& x) {
  return x.sigmoid();
}
template <std::size_t D>
Tensor<D> tanh(const Tensor<D>& x) {
  return x.tanh();
}
template <std::size_t D>
Tensor<D> leaky_relu(const Tensor<D>& x, double negative_slope = 0.01) {
  return Tensor<D>::wrap(detail::leaky_relu(x.primitive(), negative_slope));
}
// alpha broadcasts against x (one value, or one per channel shaped to broadcast).
template <std::size_t D>
Tensor<D> prelu(const Tensor<D>& x, const Tensor<D>& alpha) {
  return Tensor<D>::wrap(detail::prelu(x.primitive(), alpha.primitive()));
}
template <std::size_t D>
Tensor<D> hard_sigmoid(const Tensor<D>& x, double alpha = 1.0 / 6.0, double beta = 0.5) {
  return Tensor<D>::wrap(detail::hard_sigmoid(x.primitive(), alpha, beta));
}
template <std::size_t D>
Tensor<D> log_sigmoid(const Tensor<D>& x) {
  return Tensor<D>::wrap(detail::log_sigmoid(x.primitive()));
}
template <std::size_t D>
Tensor<D> softmax(const Tensor<D>& x, std::int64_t dim) {
  return Tensor<D>::wrap(detail::softmax(x.primitive(), dim));
}
template <std::size_t D>
Tensor<D> log_softmax(const Tensor<D>& x, std::int64_t dim) {
  return Tensor<D>::wrap(detail::log_softmax(x.primitive(), dim));
}
template <std::size_t D>
Tensor<D> softmin(const Tensor<D>& x, std::int64_t dim) {
  return Tensor<D>::wrap(detail::softmin(x.primitive(), dim));
}

}  // namespace kiln::activation
