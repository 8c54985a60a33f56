// Distributions for random tensors.
#pragma once

namespace kiln {

struct Distribution {
  enum class Kind { Default, Uniform, Normal, Bernoulli };
  Kind kind = Kind::Default;  // Default: uniform on [0, 1)
  double a = 0.0;             // uniform low, normal mean, bernoulli probability
  double b = 1.0;             // uniform high, normal standard deviation

  static Distribution standard() { return {}; }
  static Distribution uniform(double low, double high) { return {Kind::Uniform, low, high}; }
  static Distribution normal(double mean, double std) { return {Kind::Normal, mean, std}; }
  static Distribution bernoulli(double probability) { return {Kind::Bernoulli, probability, 0}; }
};

}  // namespace kiln
