// Linear: y = x Wᵀ + b over the last dim. The weight is [out, in] as in PyTorch, so records
// interchange with PyTorch files unchanged; the product uses a transposed view (no copy).
#pragma once

#include <cstdint>
#include <optional>

#include "kiln/module_ops.h"
#include "kiln/nn/init.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

struct Linear {
  Param<2> weight;               // [out, in]
  std::optional<Param<1>> bias;  // [out]
  KILN_MODULE(weight, bias)

  std::int64_t in_features() const { return weight.primitive()->shape()[1]; }
  std::int64_t out_features() const { return weight.primitive()->shape()[0]; }

  template <std::size_t D>
  Tensor<D> forward(const Tensor<D>& x) const {
    std::optional<Tensor<1>> b;
    if (bias) b = bias->val();
    return module::linear(x, weight.forward_value(), b);
  }
};

struct LinearConfig {
  std::int64_t in_features;
  std::int64_t out_features;
  bool bias = true;
  // PyTorch's defaults: weight and bias uniform in ±1/sqrt(in_features).
  Initializer initializer = Initializer::kaiming_uniform(0.5773502691896258);
  std::optional<Initializer> bias_initializer = std::nullopt;

  Linear init(const Device& device = Device::default_device()) const;
};

}  // namespace kiln::nn
