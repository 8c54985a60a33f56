// Helpers for the layer tests: deterministic inputs from a generator of the test's own (so the
// float64 references do not depend on kiln's), tensors from plain vectors and back, modules in
// float64, and a central-difference gradient check.
#pragma once

#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/nn/module.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "support/devices.h"

namespace kiln::nn::testing {

using kiln::test::kCpu;

// Uniform values in [low, high) from a 64-bit LCG.
inline std::vector<double> values(std::size_t n, std::uint64_t seed, double low = -1.0,
                                  double high = 1.0) {
  std::vector<double> out(n);
  std::uint64_t state = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (double& v : out) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    v = low + (high - low) * static_cast<double>(state >> 11) * 0x1.0p-53;
  }
  return out;
}

// A float64 tensor (float32 with f32 = true) holding v.
template <std::size_t D>
Tensor<D> tensor(const std::vector<double>& v, const Shape& shape, Device device = kCpu,
                 bool f32 = false) {
  if (f32) {
    return Tensor<D>::from_data(TensorData::from_vec(std::vector<float>(v.begin(), v.end()), shape),
                                device);
  }
  return Tensor<D>::from_data(TensorData::from_vec(v, shape), device);
}

template <std::size_t D>
Tensor<D, Int> int_tensor(const std::vector<std::int64_t>& v, const Shape& shape,
                          Device device = kCpu) {
  return Tensor<D, Int>::from_data(TensorData::from_vec(v, shape), device);
}

template <std::size_t D, class K>
std::vector<double> read(const Tensor<D, K>& t) {
  return t.into_data().to_f64_vec();
}

inline void expect_near(const std::vector<double>& got, const std::vector<double>& want,
                        double tolerance, const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tolerance * std::max(1.0, std::abs(want[i])))
        << what << " at " << i;
  }
}

template <class M>
std::vector<std::string> names(const M& module) {
  std::vector<std::string> out;
  for (const NamedParam& p : named_parameters(module)) out.push_back(p.name);
  return out;
}

template <class M>
std::vector<std::vector<std::int64_t>> shapes(const M& module) {
  std::vector<std::vector<std::int64_t>> out;
  for (const NamedParam& p : named_parameters(module)) out.push_back(p.value->shape().to_vector());
  return out;
}

// The value of a parameter by name, as float64 values.
template <class M>
std::vector<double> param(const M& module, const std::string& name) {
  for (const NamedParam& p : named_parameters(module)) {
    if (p.name == name) return TensorData(kiln::detail::into_data(p.value)).to_f64_vec();
  }
  ADD_FAILURE() << "no parameter " << name;
  return {};
}

// Every parameter and buffer cast to float64 (the reference computations are float64).
template <class M>
M to_f64(M module) {
  return cast(std::move(module), DType::F64);
}

// Checks d loss / d leaf for the given leaves against central differences of loss(leaves),
// one coordinate at a time; leaves are float64 values.
template <std::size_t D>
void expect_gradient_matches_differences(
    const std::function<Tensor<1>(const std::vector<Tensor<D>>&)>& loss,
    const std::vector<std::vector<double>>& leaf_values, const std::vector<Shape>& leaf_shapes,
    double tolerance = 1e-6) {
  const Device ad = kCpu.autodiff();
  std::vector<Tensor<D>> leaves;
  for (std::size_t i = 0; i < leaf_values.size(); ++i) {
    leaves.push_back(tensor<D>(leaf_values[i], leaf_shapes[i], ad).require_grad());
  }
  const Gradients grads = loss(leaves).backward();
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    const std::optional<Tensor<D>> g = leaves[i].grad(grads);
    ASSERT_TRUE(g.has_value()) << "leaf " << i << " got no gradient";
    const std::vector<double> analytic = read(*g);
    for (std::size_t j = 0; j < leaf_values[i].size(); ++j) {
      const double h = 1e-6;
      auto at = [&](double delta) {
        std::vector<Tensor<D>> moved;
        for (std::size_t k = 0; k < leaf_values.size(); ++k) {
          std::vector<double> v = leaf_values[k];
          if (k == i) v[j] += delta;
          moved.push_back(tensor<D>(v, leaf_shapes[k]));
        }
        return read(loss(moved))[0];
      };
      const double numeric = (at(h) - at(-h)) / (2 * h);
      EXPECT_NEAR(analytic[j], numeric, tolerance * std::max(1.0, std::abs(numeric)))
          << "leaf " << i << " element " << j;
    }
  }
}

// A copy of module with the parameter called name holding values (same shape, float64).
template <class M>
M with_param(M module, const std::string& name, const std::vector<double>& values) {
  struct Replace final : Visitor {
    const std::string* name;
    const std::vector<double>* values;
    void visit(const std::string& n, ParamSlot& slot) override {
      if (n != *name) return;
      const Primitive& old = slot.primitive();
      slot.set_primitive(kiln::detail::from_data(TensorData::from_vec(*values, old->shape()),
                                                 old->device().without_autodiff(), Kind::Float,
                                                 old->rank()));
    }
  } replace;
  replace.name = &name;
  replace.values = &values;
  module.visit(replace);
  return module;
}

// Checks the gradients of loss(train(module), x) with respect to every trainable parameter and
// to x against central differences (a few coordinates of each, spread over the tensor). The
// module is float64; the differences are evaluated in training mode too, so layers that use
// batch statistics are checked as they train.
template <class M, std::size_t D>
void expect_layer_gradients(const M& module,
                            const std::function<Tensor<1>(const M&, const Tensor<D>&)>& loss,
                            const std::vector<double>& x, const Shape& x_shape,
                            double tolerance = 1e-6, std::size_t coordinates = 6) {
  const Device ad = kCpu.autodiff();
  const M tracked = train(module);
  const Tensor<D> x_leaf = tensor<D>(x, x_shape, ad).require_grad();
  const Gradients grads = loss(tracked, x_leaf).backward();
  const double h = 1e-6;
  auto evaluate = [&](const M& m, const std::vector<double>& input) {
    return read(loss(train(m), tensor<D>(input, x_shape, ad)))[0];
  };
  auto check = [&](const std::string& what, const std::vector<double>& analytic,
                   const std::function<double(std::size_t, double)>& moved) {
    const std::size_t n = analytic.size();
    const std::size_t step = std::max<std::size_t>(1, n / coordinates);
    for (std::size_t j = 0; j < n; j += step) {
      const double numeric = (moved(j, h) - moved(j, -h)) / (2 * h);
      EXPECT_NEAR(analytic[j], numeric, tolerance * std::max(1.0, std::abs(numeric)))
          << what << " element " << j;
    }
  };
  for (const NamedParam& p : named_parameters(tracked)) {
    if (!p.trainable) continue;
    const std::optional<Primitive> g = kiln::detail::grad(p.value, grads);
    ASSERT_TRUE(g.has_value()) << p.name << " got no gradient";
    const std::vector<double> base = param(module, p.name);
    check(p.name, TensorData(kiln::detail::into_data(*g)).to_f64_vec(),
          [&](std::size_t j, double delta) {
            std::vector<double> v = base;
            v[j] += delta;
            return evaluate(with_param(module, p.name, v), x);
          });
  }
  const std::optional<Tensor<D>> gx = x_leaf.grad(grads);
  ASSERT_TRUE(gx.has_value()) << "the input got no gradient";
  check("input", read(*gx), [&](std::size_t j, double delta) {
    std::vector<double> v = x;
    v[j] += delta;
    return evaluate(module, v);
  });
}

// sum(y * weights): a scalar that depends on every output element differently.
template <std::size_t D>
Tensor<1> weighted_sum(const Tensor<D>& y, std::uint64_t seed = 99) {
  const Tensor<D> w =
      tensor<D>(values(static_cast<std::size_t>(y.num_elements()), seed), y.shape());
  return (y * w).sum();
}

}  // namespace kiln::nn::testing
