// Activation modules: stateless wrappers of kiln::activation, for Sequential and for models that
// choose their activation as a value. Each maps a tensor of any rank to one of the same shape.
//
//   nn::Sequential net(nn::LinearConfig{4, 8}.init(dev), nn::Gelu{}, nn::LinearConfig{8,
//   2}.init(dev)); auto p = nn::Softmax{.dim = 1}.forward(logits);
#pragma once

#include <cmath>
#include <cstdint>

#include "kiln/activation.h"
#include "kiln/nn/stateless.h"

namespace kiln::nn {

struct Relu {
  KILN_STATELESS_MODULE
  template <std::size_t D>
  Tensor<D> forward(const Tensor<D>& x) const {
    return activation::relu(x);
  }
};

// Exact (erf) GELU by default; tanh_approximation selects PyTorch's approximate='tanh' form
// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
struct Gelu {
  bool tanh_approximation = false;
  KILN_STATELESS_MODULE
  template <std::size_t D>
  Tensor<D> forward(const Tensor<D>& x) const {
    if (!tanh_approximation) return activation::gelu(x);
    const double k = std::sqrt(2.0 / 3.14159265358979323846);
    const Tensor<D> inner = (x + x * x * x * 0.044715) * k;
    return x * (inner.tanh() + 1.0) * 0.5;
  }
};

struct Silu {
  KILN_STATELESS_MODULE
  template <std::size_t D>
  Tensor<D> forward(const Tensor<D>& x) const {
    return activation::silu(x);
  }
};

struct Sigmoid {
  KILN_STATELESS_MODULE
  template <std::size_t D>
  Tensor<D> forward(const Tensor<D>& x) const {
    return activation::sigmoid(x);
  }
};

struct Tanh {
  KILN_STATELESS_MODULE
  template <std::size_t D>
  Tensor<D> forward(const Tensor<D>& x) const {
    return activation::tanh(x);
  }
};

struct LeakyRelu {
  double negative_slope = 0.01;
  KILN_STATELESS_MODULE
  template <std::size_t D>
  Tensor<D> forward(const Tensor<D>& x) const {
    return activation::leaky_relu(x, negative_slope);
  }
};

// Softmax along dim (negative counts from the end).
struct Softmax {
  std::int64_t dim = -1;
  KILN_STATELESS_MODULE
  template <std::size_t D>
  Tensor<D> forward(const Tensor<D>& x) const {
    return activation::softmax(x, dim);
  }
};

struct LogSoftmax {
  std::int64_t dim = -1;
  KILN_STATELESS_MODULE
  template <std::size_t D>
  Tensor<D> forward(const Tensor<D>& x) const {
    return activation::log_softmax(x, dim);
  }
};

}  // namespace kiln::nn
