// A small module whose gradients are known in closed form, shared by the optimizer tests.
//
// The loss over the trainable values θ (w then b, flattened) at step t is
//   L(θ) = Σ_i c_i θ_i² / 2 + d_{t,i} θ_i,   so   ∂L/∂θ_i = c_i θ_i + d_{t,i},
// which lets a float64 reference in each test follow the whole trajectory. `unused` takes no
// part in the loss (it never gets a gradient) and `stats` is a buffer.
#pragma once

#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/nn/module.h>

#include <cmath>
#include <vector>

#include "support/devices.h"

namespace kiln::optim::testing {

using kiln::test::kCpu;

struct Toy {
  nn::Param<2> w;       // [2, 3]
  nn::Param<1> b;       // [3]
  nn::Param<1> unused;  // [2], never in the loss
  nn::Buffer<1> stats;  // [2]
  KILN_MODULE(w, b, unused, stats)
};

inline constexpr std::size_t kWSize = 6;
inline constexpr std::size_t kThetaSize = 9;  // w then b

inline double curvature(std::size_t i) { return 0.5 + 0.25 * static_cast<double>(i); }
inline double drift(std::size_t i, int t) {
  return std::sin(1.3 * static_cast<double>(i) + 0.7 * t) * (1.0 + 0.1 * t);
}

template <std::size_t D>
Tensor<D> tensor_of(const std::vector<double>& values, Shape shape, DType dtype) {
  return Tensor<D>::from_data(TensorData::from_vec(values, shape).convert(dtype), kCpu);
}

// A Toy in training mode with the given dtype.
inline Toy make_toy(DType dtype = DType::F64) {
  Toy toy{nn::Param<2>(tensor_of<2>({0.5, -1.0, 1.5, 2.0, -0.25, 0.75}, Shape{2, 3}, dtype)),
          nn::Param<1>(tensor_of<1>({0.1, -0.2, 0.3}, Shape{3}, dtype)),
          nn::Param<1>(tensor_of<1>({4.0, -4.0}, Shape{2}, dtype)),
          nn::Buffer<1>(tensor_of<1>({1.0, 2.0}, Shape{2}, dtype))};
  return nn::train(toy);
}

// The loss at step t over the parameters named in `with_b` (w always, b when with_b).
inline Gradients toy_backward(const Toy& toy, int t, bool with_b = true) {
  const DType dtype = toy.w.val().dtype();
  auto term = [&]<std::size_t D>(const Tensor<D>& theta, std::size_t offset, Shape shape) {
    std::vector<double> c, d;
    for (std::int64_t i = 0; i < shape.num_elements(); ++i) {
      c.push_back(curvature(offset + i) / 2.0);
      d.push_back(drift(offset + i, t));
    }
    return (theta * theta * tensor_of<D>(c, shape, dtype) + theta * tensor_of<D>(d, shape, dtype))
        .sum();
  };
  auto loss = term(toy.w.val(), 0, Shape{2, 3});
  if (with_b) loss = loss + term(toy.b.val(), kWSize, Shape{3});
  return loss.backward();
}

// ∂L/∂θ for the flattened values (the part of theta starting at offset).
inline std::vector<double> toy_gradient(const std::vector<double>& theta, int t,
                                        std::size_t offset = 0) {
  std::vector<double> g(theta.size());
  for (std::size_t i = 0; i < theta.size(); ++i) {
    g[i] = curvature(offset + i) * theta[i] + drift(offset + i, t);
  }
  return g;
}

inline std::vector<double> values(const Primitive& p) {
  return kiln::detail::into_data(kiln::detail::inner(p)).to_f64_vec();
}

// w then b, flattened.
inline std::vector<double> theta_of(const Toy& toy) {
  std::vector<double> theta = values(toy.w.primitive());
  const std::vector<double> b = values(toy.b.primitive());
  theta.insert(theta.end(), b.begin(), b.end());
  return theta;
}

inline void expect_near(const std::vector<double>& got, const std::vector<double>& want,
                        double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tolerance * (1.0 + std::abs(want[i]))) << what << " [" << i << "]";
  }
}

// Runs opt on a fresh Toy for `steps` steps at rate lr(t) beside a float64 reference (anything
// with `step(theta, gradient, lr)` over the flattened w and b), checking the values after every
// step and that `unused` and the buffer never change.
template <class Optimizer, class Reference, class Rate>
void run_against(Optimizer& opt, Reference reference, int steps, Rate lr, const std::string& label,
                 double tolerance = 1e-12) {
  Toy toy = make_toy();
  std::vector<double> theta = theta_of(toy);
  const std::vector<double> unused = values(toy.unused.primitive());
  const std::vector<double> stats = values(toy.stats.primitive());
  for (int t = 0; t < steps; ++t) {
    Gradients grads = toy_backward(toy, t);
    EXPECT_EQ(opt.step(toy, grads, lr(t)), 2u) << label;
    reference.step(theta, toy_gradient(theta, t), lr(t));
    expect_near(theta_of(toy), theta, tolerance, label + ", step " + std::to_string(t));
  }
  EXPECT_EQ(values(toy.unused.primitive()), unused) << label;
  EXPECT_EQ(values(toy.stats.primitive()), stats) << label;
  // Updated parameters are fresh tracked leaves on the autodiff device, in their dtype.
  for (const Primitive& p : {toy.w.primitive(), toy.b.primitive()}) {
    EXPECT_TRUE(kiln::detail::is_require_grad(p)) << label;
    EXPECT_TRUE(p->device().is_autodiff()) << label;
    EXPECT_EQ(p->dtype(), DType::F64) << label;
  }
  EXPECT_EQ(opt.steps(), steps) << label;
}

}  // namespace kiln::optim::testing
