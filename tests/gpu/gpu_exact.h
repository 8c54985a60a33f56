// For GPU tests of ops whose results must equal the CPU backend's exactly (selections, positions,
// ranges): random host data of any dtype with ties and special values on request, and an exact
// comparison (integers bit for bit, floats by value with NaN matching NaN and the sign of zero
// compared).
#pragma once

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kiln/detail/tensor_ops.h"

namespace kiln::test {

// Every dtype a tensor on the GPU can have, the numeric ones first.
inline constexpr DType kEveryDType[] = {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64,
                                        DType::I32, DType::I16, DType::I8,  DType::U64,  DType::U32,
                                        DType::U16, DType::U8,  DType::Bool};
inline constexpr std::span<const DType> kNumericDTypes(kEveryDType, 12);

enum class Fill {
  Wide,     // floats uniform in [-1e3, 1e3]; integers any bits of their width
  Ties,     // a handful of distinct values, so most elements tie
  Special,  // floats: NaN (both signs), +-0, +-inf among ties; integers: extremes among ties
};

inline Kind kind_of(DType dtype) {
  return is_float(dtype) ? Kind::Float : (dtype == DType::Bool ? Kind::Bool : Kind::Int);
}

// Host data of shape and dtype, filled as asked, reproducible from seed.
inline TensorData random_data(const Shape& shape, DType dtype, std::uint64_t seed, Fill fill) {
  std::mt19937_64 gen(seed);
  const auto n = static_cast<std::size_t>(shape.num_elements());
  if (dtype == DType::Bool) {
    std::vector<std::byte> bytes(n);
    for (auto& b : bytes) b = std::byte(gen() % 3 == 0);  // about a third set
    return TensorData(std::move(bytes), shape, dtype);
  }
  if (is_int(dtype) && fill == Fill::Wide) {
    const std::size_t size = dtype_size(dtype);
    std::vector<std::byte> bytes(n * size);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t bits = gen();
      std::memcpy(bytes.data() + i * size, &bits, size);  // little-endian: the low bytes
    }
    return TensorData(std::move(bytes), shape, dtype);
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> values(n);
  for (double& v : values) {
    if (fill == Fill::Wide) {
      v = std::uniform_real_distribution<double>(-1e3, 1e3)(gen);
      continue;
    }
    v = static_cast<double>(gen() % 5) - (is_unsigned_int(dtype) ? 0.0 : 2.0);
    if (fill == Fill::Special && gen() % 3 == 0) {
      if (is_float(dtype)) {
        const double specials[] = {nan, -nan, 0.0, -0.0, inf, -inf};
        v = specials[gen() % 6];
      } else {
        v = gen() % 2 ? 0.0 : (is_unsigned_int(dtype) ? 255.0 : -128.0);  // extremes of 8 bits
      }
    }
  }
  return TensorData::from_vec(values, shape).convert(dtype);
}

inline Primitive on_cpu(const TensorData& data) {
  return detail::from_data(data, Device::cpu(), kind_of(data.dtype()), data.shape().rank());
}

// got and want equal: shape, dtype, and every element (see the file comment).
inline void expect_exact(const TensorData& got, const TensorData& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  int reported = 0;
  auto report = [&](std::size_t i, const std::string& g, const std::string& w) {
    if (reported++ < 5) ADD_FAILURE() << what << ": element " << i << " is " << g << ", want " << w;
  };
  if (!is_float(got.dtype())) {
    const std::size_t size = dtype_size(got.dtype());
    const auto g = got.bytes(), w = want.bytes();
    for (std::size_t i = 0; i * size < g.size(); ++i) {
      if (std::memcmp(g.data() + i * size, w.data() + i * size, size) != 0) {
        std::int64_t a = 0, b = 0;
        std::memcpy(&a, g.data() + i * size, size);
        std::memcpy(&b, w.data() + i * size, size);
        report(i, std::to_string(a), std::to_string(b));
      }
    }
    return;
  }
  const auto g = got.to_f64_vec(), w = want.to_f64_vec();
  for (std::size_t i = 0; i < g.size(); ++i) {
    const bool same = (std::isnan(g[i]) && std::isnan(w[i])) ||
                      (g[i] == w[i] && std::signbit(g[i]) == std::signbit(w[i]));
    if (!same) report(i, std::to_string(g[i]), std::to_string(w[i]));
  }
}

// build(device) on the GPU and on the CPU, compared exactly.
inline void expect_exact(const Device& gpu, const std::function<Primitive(Device)>& build,
                         const std::string& what) {
  const TensorData got = detail::into_data(build(gpu));
  const TensorData want = detail::into_data(build(Device::cpu()));
  expect_exact(got, want, what);
}

inline void expect_exact_pair(const Device& gpu,
                              const std::function<std::pair<Primitive, Primitive>(Device)>& build,
                              const std::string& what) {
  const auto got = build(gpu);
  const auto want = build(Device::cpu());
  expect_exact(detail::into_data(got.first), detail::into_data(want.first), what + " values");
  expect_exact(detail::into_data(got.second), detail::into_data(want.second), what + " indices");
}

}  // namespace kiln::test
