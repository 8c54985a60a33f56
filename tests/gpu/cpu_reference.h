// Shared by the GPU tests that compare with the CPU backend (reductions, softmax): random
// values made on the CPU (the same on both devices once moved), and an elementwise comparison
// that treats NaN as equal to NaN and an infinity as equal to itself.
#pragma once

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "kiln/detail/tensor_ops.h"

namespace kiln::test {

// Values uniform in [lo, hi] as dtype (rounded first for integer and Bool dtypes), with
// specials[i] = (flat index, value) written over them where the index is in range.
inline Primitive host_values(const Shape& shape, DType dtype, std::uint64_t seed, double lo,
                             double hi,
                             const std::vector<std::pair<std::int64_t, double>>& specials = {}) {
  Device::cpu().seed(seed);
  Primitive p =
      detail::random(shape, Distribution::uniform(lo, hi), DType::F64, Device::cpu(), Kind::Float);
  std::vector<double> values = detail::into_data(p).to_f64_vec();
  if (!is_float(dtype)) {
    for (double& v : values) v = std::round(v);
  }
  for (const auto& [at, v] : specials) {
    if (at < static_cast<std::int64_t>(values.size())) values[static_cast<std::size_t>(at)] = v;
  }
  const Kind kind = is_float(dtype) ? Kind::Float : dtype == DType::Bool ? Kind::Bool : Kind::Int;
  return detail::from_data(TensorData::from_vec(values, shape).convert(dtype), Device::cpu(), kind,
                           shape.rank());
}

// |got - want| <= tolerance * (1 + |want|) everywhere; same shape and dtype.
inline void expect_close_to_cpu(const TensorData& got, const TensorData& want, double tolerance,
                                const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const std::vector<double> g = got.to_f64_vec(), w = want.to_f64_vec();
  int reported = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const bool same = g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i]));
    if (!same && !(std::fabs(g[i] - w[i]) <= tolerance * (1 + std::fabs(w[i]))) && reported++ < 5) {
      ADD_FAILURE() << what << " element " << i << ": " << g[i] << " vs " << w[i];
    }
  }
}

}  // namespace kiln::test
