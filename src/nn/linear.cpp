#include "kiln/nn/linear.h"

#include <cmath>

#include "kiln/detail/format.h"

namespace kiln::nn {

Linear LinearConfig::init(const Device& device) const {
  if (in_features <= 0 || out_features <= 0) {
    kiln::detail::fail<InvalidArgument>("LinearConfig::init", "in_features ", in_features,
                                        " and out_features ", out_features,
                                        " must both be positive");
  }
  Linear layer;
  layer.weight = Param<2>(initializer.init<2>(Shape{out_features, in_features}, device));
  if (bias) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    const Initializer b = bias_initializer.value_or(Initializer::uniform(-bound, bound));
    layer.bias = Param<1>(b.init<1>(Shape{out_features}, in_features, out_features, device));
  }
  return layer;
}

}  // namespace kiln::nn
