// Shared by the GPU tests: the device under test, or a clean skip saying why there is none.
#pragma once

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "kiln/detail/tensor_ops.h"
#include "runtime/cuda_plugin.h"

namespace kiln::test {

// cuda:0 when usable; otherwise nullopt and reason says why.
inline std::optional<Device> first_gpu(std::string& reason) {
  if (cuda_device_count(&reason) == 0) return std::nullopt;
  return Device::cuda(0);
}

inline KernelCacheStats kernel_stats(const Device& device) {
  return cuda_plugin(nullptr)->kernel_cache_stats(device.index());
}

// Random values drawn on the CPU (the same on both devices once moved), uniform in [lo, hi),
// rounded to integers when round is set, as dtype.
inline Primitive host_random(const Shape& shape, DType dtype, std::uint64_t seed, double lo,
                             double hi, bool round = false) {
  Device::cpu().seed(seed);
  const Primitive p =
      detail::random(shape, Distribution::uniform(lo, hi), DType::F64, Device::cpu(), Kind::Float);
  auto values = detail::into_data(p).to_f64_vec();
  if (round) {
    for (double& v : values) v = std::round(v);
  }
  return detail::from_data(
      TensorData::from_vec(values, shape).convert(dtype), Device::cpu(),
      is_float(dtype) ? Kind::Float : (dtype == DType::Bool ? Kind::Bool : Kind::Int),
      shape.rank());
}

// x + 1, `steps` times, each op depending on the one before: a chain of launches that keeps the
// launcher busy (most of a long chain is still queued when the call returns).
inline Tensor<1> count_up(Tensor<1> x, int steps) {
  for (int i = 0; i < steps; ++i) x = x + 1.0;
  return x;
}

// The float dtypes, widest first.
inline constexpr DType kFloatDTypes[] = {DType::F64, DType::F32, DType::F16, DType::BF16};

// x on device d.
inline Primitive on(const Primitive& x, Device d) { return detail::to_device(x, d); }

// An op's result made on the device it is given.
using Build = std::function<Primitive(Device)>;

// |got - want| <= tolerance * (1 + |want|) for every element, or both NaN; same shape and dtype.
inline void expect_near_all(const TensorData& got, const TensorData& want, double tolerance,
                            const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const auto g = got.to_f64_vec(), w = want.to_f64_vec();
  int reported = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const bool both_nan = std::isnan(g[i]) && std::isnan(w[i]);
    if (!both_nan && !(std::fabs(g[i] - w[i]) <= tolerance * (1 + std::fabs(w[i]))) &&
        reported++ < 5) {
      ADD_FAILURE() << what << " element " << i << ": " << g[i] << " vs " << w[i];
    }
  }
}

// build(device) on the GPU and on the CPU, compared by expect_near_all.
inline void expect_same(const Device& gpu, const Build& build, double tolerance,
                        const std::string& what) {
  const TensorData got = detail::into_data(build(gpu));
  const TensorData want = detail::into_data(build(Device::cpu()));
  expect_near_all(got, want, tolerance, what);
}

// Relative tolerance of a result computed in the dtype's compute type and rounded once.
inline double tolerance_of(DType dtype) {
  switch (dtype) {
    case DType::F64:
      return 1e-12;
    case DType::F32:
      return 1e-5;
    case DType::F16:
      return 2e-3;
    case DType::BF16:
      return 1.6e-2;
    default:
      return 0;
  }
}

}  // namespace kiln::test

// Declares `device` (cuda:0) or skips the test with the reason.
#define KILN_REQUIRE_GPU()                                              \
  std::string kiln_gpu_reason;                                          \
  const auto kiln_gpu = ::kiln::test::first_gpu(kiln_gpu_reason);       \
  if (!kiln_gpu) GTEST_SKIP() << "no CUDA device: " << kiln_gpu_reason; \
  [[maybe_unused]] const ::kiln::Device device = *kiln_gpu
