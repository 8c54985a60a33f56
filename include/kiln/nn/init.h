// Parameter initialisers. Random ones draw from the device's generator, so `dev.seed(s)` makes
// a model's initial weights reproducible. fan_in / fan_out follow PyTorch: for a weight of shape
// [out, in, k...], fan_in = in * prod(k) and fan_out = out * prod(k).
//
// Under nn::SkipInit no initialiser computes anything: a model whose weights come from a
// checkpoint is built in the time of its allocations (nn::from_record does this for you).
#pragma once

#include <cstdint>

#include "kiln/tensor.h"

namespace kiln::nn {

class Initializer {
 public:
  enum class Kind : std::uint8_t {
    Constant,
    Uniform,
    Normal,
    KaimingUniform,
    KaimingNormal,
    XavierUniform,
    XavierNormal
  };

  static Initializer constant(double value) { return {Kind::Constant, value, 0}; }
  static Initializer zeros() { return constant(0.0); }
  static Initializer ones() { return constant(1.0); }
  static Initializer uniform(double low, double high) { return {Kind::Uniform, low, high}; }
  static Initializer normal(double mean, double std) { return {Kind::Normal, mean, std}; }
  // He et al.: bound = gain * sqrt(3 / fan_in); gain sqrt(2) suits ReLU. PyTorch's default for
  // Linear and Conv weights is kaiming_uniform(1 / sqrt(3)) (bound 1 / sqrt(fan_in)).
  static Initializer kaiming_uniform(double gain = 1.4142135623730951) {
    return {Kind::KaimingUniform, gain, 0};
  }
  static Initializer kaiming_normal(double gain = 1.4142135623730951) {
    return {Kind::KaimingNormal, gain, 0};
  }
  // Glorot & Bengio: bound = gain * sqrt(6 / (fan_in + fan_out)).
  static Initializer xavier_uniform(double gain = 1.0) { return {Kind::XavierUniform, gain, 0}; }
  static Initializer xavier_normal(double gain = 1.0) { return {Kind::XavierNormal, gain, 0}; }

  Kind kind() const noexcept { return kind_; }

  // A tensor of shape drawn from this initialiser, for a parameter with the given fans; under
  // SkipInit, uninitialised storage of that shape (arguments are still checked).
  template <std::size_t D>
  Tensor<D> init(const Shape& shape, std::int64_t fan_in, std::int64_t fan_out,
                 const Device& device) const {
    return Tensor<D>::from_primitive(make(shape, fan_in, fan_out, device));
  }
  // The same, with fans derived from a weight shape [out, in, k...] (rank 1: fan_in = fan_out = n).
  template <std::size_t D>
  Tensor<D> init(const Shape& shape, const Device& device) const {
    return Tensor<D>::from_primitive(make(shape, fan_in_of(shape), fan_out_of(shape), device));
  }

  static std::int64_t fan_in_of(const Shape& shape);
  static std::int64_t fan_out_of(const Shape& shape);

 private:
  Initializer(Kind kind, double a, double b) : kind_(kind), a_(a), b_(b) {}
  Primitive make(const Shape& shape, std::int64_t fan_in, std::int64_t fan_out,
                 const Device& device) const;

  Kind kind_;
  double a_;
  double b_;
};

// While a SkipInit lives on this thread, every Initializer returns uninitialised storage of the
// parameter's shape, dtype and device, and draws nothing from the device's generator: building
// a BERT-base from its config then costs its allocations, not 110 M random draws. The values are
// garbage until a record replaces them, so load every parameter before any use (nn::from_record
// builds under SkipInit and loads strictly). Constants a layer makes without an Initializer
// (LayerNorm's ones, attention's zero biases, BatchNorm's statistics) are still filled. Scopes
// nest; other threads are unaffected.
//
//   nn::Linear layer = [&] { nn::SkipInit skip; return nn::LinearConfig{768, 768}.init(dev); }();
//   nn::load(layer, "dense.safetensors");
class SkipInit {
 public:
  [[nodiscard]] SkipInit() noexcept;
  ~SkipInit();
  SkipInit(const SkipInit&) = delete;
  SkipInit& operator=(const SkipInit&) = delete;

  // Whether a SkipInit lives on the calling thread.
  static bool active() noexcept;
};

}  // namespace kiln::nn
