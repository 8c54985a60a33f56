// Distributions for random tensors.
//
//   auto w = Tensor<2>::random({64, 64}, Distribution::uniform(-0.1, 0.1), dev);
//   auto n = Tensor<2>::random({64, 64}, Distribution::normal(0, 0.02), dev);
//
// The factories refuse parameters that describe no distribution (InvalidArgument naming the
// values): bounds or a mean that are not finite, uniform's low above its high or a width beyond
// the largest double, normal's standard deviation negative or not finite, bernoulli's
// probability outside [0, 1]. `random` checks the distribution it is given the same way, so a
// Distribution built field by field cannot bypass them.
#pragma once

#include <string_view>

namespace kiln {

struct Distribution {
  enum class Kind { Default, Uniform, Normal, Bernoulli };
  Kind kind = Kind::Default;  // Default: uniform on [0, 1)
  double a = 0.0;             // uniform low, normal mean, bernoulli probability
  double b = 1.0;             // uniform high, normal standard deviation

  static Distribution standard() { return {}; }
  // [low, high); low == high gives low.
  static Distribution uniform(double low, double high);
  // std == 0 gives mean.
  static Distribution normal(double mean, double std);
  static Distribution bernoulli(double probability);

  // InvalidArgument "[op] ..." unless the parameters are valid for the kind (see above).
  void check(std::string_view op) const;
};

}  // namespace kiln
