// Shared by the autodiff tests: tensors from host values, values back as doubles, and a
// closeness check against references worked out in double precision.
#pragma once

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "support/devices.h"
#include "support/spread.h"

namespace kiln::autodiff_test {

using kiln::test::kCpu;
inline const Device kAd = Device::cpu().autodiff();

// A tensor holding values (given in double, stored as dtype) on device.
template <std::size_t D>
Tensor<D> tensor(const std::vector<double>& values, Shape shape, Device device = kAd,
                 DType dtype = DType::F32) {
  return Tensor<D>::from_data(TensorData::from_vec(values, std::move(shape)).convert(dtype),
                              device);
}

template <std::size_t D, class K>
std::vector<double> values(const Tensor<D, K>& t) {
  return t.into_data().to_f64_vec();
}

// The gradient of x in g, which must be there.
template <std::size_t D>
Tensor<D> grad_of(const Tensor<D>& x, const Gradients& g) {
  std::optional<Tensor<D>> gx = x.grad(g);
  if (!gx) throw std::runtime_error("the leaf has no gradient");
  return *gx;
}

// |got - want| <= tolerance * max(1, |want|), element by element.
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                         double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::abs(got[i] - want[i]), tolerance * std::max(1.0, std::abs(want[i])))
        << what << " [" << i << "]: got " << got[i] << ", want " << want[i];
  }
}

// Deterministic values in [lo, hi) without a device random generator.
inline std::vector<double> spread(std::size_t n, double lo, double hi, std::uint32_t seed = 1) {
  return test::spread(static_cast<std::int64_t>(n), seed, lo, hi);
}

}  // namespace kiln::autodiff_test
