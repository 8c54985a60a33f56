// Shared by the convolution tests on the GPU (backend_conv_test.cpp: kiln's own path;
// backend_conv_cudnn_test.cpp: through cuDNN): the cases, their inputs drawn on the CPU and laid
// out four ways, and the comparison with the CPU backend.
#pragma once

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gpu/gpu_test_support.h"
#include "kiln/detail/tensor_ops.h"
#include "runtime/registry.h"

// Named: the suite is compiled in unity batches, where anonymous namespaces merge.
namespace gpu_conv {

using namespace kiln;
using test::Build;
using test::kFloatDTypes;
using test::on;

// Conv results are finite: unlike test::expect_near_all, a NaN (or an infinity) fails even where
// the CPU has one too.
inline void expect_near_all_finite(const TensorData& got, const TensorData& want, double tolerance,
                                   const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const auto g = got.to_f64_vec(), w = want.to_f64_vec();
  int reported = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (!(std::fabs(g[i] - w[i]) <= tolerance * (1 + std::fabs(w[i]))) && reported++ < 5) {
      ADD_FAILURE() << what << " element " << i << ": " << g[i] << " vs " << w[i];
    }
  }
}

// build(device) on the GPU and on the CPU, compared by expect_near_all_finite.
inline void expect_same_finite(const Device& gpu, const Build& build, double tolerance,
                               const std::string& what) {
  const TensorData got = detail::into_data(build(gpu));
  const TensorData want = detail::into_data(build(Device::cpu()));
  expect_near_all_finite(got, want, tolerance, what);
}

// Uniform in [-1, 1) on the CPU, as dtype (the same values on both devices once moved).
inline Primitive host_random(const Shape& shape, DType dtype, std::uint64_t seed) {
  Device::cpu().seed(seed);
  Primitive p =
      detail::random(shape, Distribution::uniform(-1, 1), DType::F64, Device::cpu(), Kind::Float);
  return detail::from_data(detail::into_data(p).convert(dtype), Device::cpu(), Kind::Float,
                           shape.rank());
}

// Relative to 1 + |expected|. Sums of up to a few hundred products of values in [-1, 1); the
// 16-bit floats: the GPU rounds the product before adding the bias (conv) or the products
// before col2im sums them (conv_transpose), the CPU once at the end.
inline double conv_tolerance(DType dtype) {
  switch (dtype) {
    case DType::F64:
      return 1e-10;
    case DType::F32:
      return 1e-4;
    case DType::F16:
      return 1e-2;
    case DType::BF16:
      return 5e-2;
    default:
      return 0;
  }
}

struct ConvCase {
  std::string name;
  Shape x, w;
  ConvOptions options;
  bool bias = true;
};

inline std::vector<ConvCase> conv_cases() {
  return {
      {"1d groups stride dilation", {2, 4, 11}, {6, 2, 3}, {{2}, {1}, {2}, 2}},
      {"1d plain", {3, 5, 9}, {4, 5, 4}, {}, false},
      {"2d padding", {2, 3, 9, 8}, {4, 3, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}},
      {"2d stride dilation", {2, 3, 10, 9}, {5, 3, 3, 2}, {{2, 1}, {0, 2}, {1, 2}, 1}},
      {"2d groups 3", {3, 6, 7, 7}, {6, 2, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 3}, false},
      {"2d depthwise", {2, 4, 6, 5}, {8, 1, 3, 3}, {{1, 2}, {1, 1}, {1, 1}, 4}},
      {"2d kernel 4", {1, 2, 4, 4}, {3, 2, 4, 4}, {{1, 1}, {1, 1}, {1, 1}, 1}},
      {"3d", {2, 4, 5, 6, 5}, {4, 2, 2, 3, 2}, {{1, 2, 1}, {1, 0, 1}, {2, 1, 1}, 2}},
      {"3d plain", {1, 2, 4, 4, 4}, {3, 2, 3, 3, 3}, {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 1}, false},
      {"pointwise", {2, 8, 5, 5}, {4, 8, 1, 1}, {}},
      {"pointwise groups", {3, 6, 4, 3}, {4, 3, 1, 1}, {{1, 1}, {0, 0}, {1, 1}, 2}},
      {"pointwise stride", {2, 4, 7, 7}, {3, 4, 1, 1}, {{2, 2}, {0, 0}, {1, 1}, 1}},
      {"batch 0", {0, 4, 5, 5}, {2, 4, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}},
      {"64 channels 3x3", {2, 64, 14, 14}, {64, 64, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}},
  };
}

// Inputs of one shape laid out four ways, each with its own random values (the same on both
// devices): contiguous; channels-last storage viewed channels-first (permuted); flipped along
// the batch and the first spatial dim (negative strides); every other element of a wider tensor
// (stride 2, odd offset).
using View = std::function<Primitive(Device)>;
inline std::vector<std::pair<std::string, View>> views(std::uint64_t& seed, DType dtype,
                                                       const Shape& shape) {
  const std::size_t rank = shape.rank();
  std::vector<std::int64_t> to_first{0, static_cast<std::int64_t>(rank) - 1};
  for (std::size_t d = 1; d + 1 < rank; ++d) to_first.push_back(static_cast<std::int64_t>(d));
  detail::DimVector last{shape[0]};
  for (std::size_t d = 2; d < rank; ++d) last.push_back(shape[d]);
  last.push_back(shape[1]);
  detail::DimVector wide(shape.vector());
  wide[rank - 1] = 2 * wide[rank - 1] + 1;
  Primitive plain = host_random(shape, dtype, seed++);
  Primitive channels_last = host_random(Shape(last), dtype, seed++);
  Primitive flipped = host_random(shape, dtype, seed++);
  Primitive wider = host_random(Shape(wide), dtype, seed++);
  std::vector<Slice> odd(rank, Slice::all());
  odd[rank - 1] = Slice(1, std::nullopt, 2);
  return {
      {"contiguous", [=](Device d) { return on(plain, d); }},
      {"channels last", [=](Device d) { return detail::permute(on(channels_last, d), to_first); }},
      {"flipped",
       [=](Device d) {
         return detail::flip(on(flipped, d), {0, 2});
       }},
      {"strided offset", [=](Device d) { return detail::slice(on(wider, d), odd); }},
  };
}

// The gradients sum over images and positions: more terms than the forward.
inline double gradient_tolerance(DType dtype) {
  return conv_tolerance(dtype) * (dtype == DType::F64 ? 1 : 2);
}

// A case's input and weight drawn as dtype, and the shape of its output (the CPU's).
struct GradientInputs {
  Primitive x, w;
  Shape y_shape;
};
inline GradientInputs gradient_inputs(const ConvCase& c, DType dtype, std::uint64_t& seed) {
  GradientInputs in;
  in.x = host_random(c.x, dtype, seed++);
  in.w = host_random(c.w, dtype, seed++);
  in.y_shape =
      detail::into_data(backend_for(Device::cpu()).conv(in.x, in.w, std::nullopt, c.options))
          .shape();
  return in;
}

struct TransposeCase {
  std::string name;
  Shape x, w;  // x [n, c_in, ...], w [c_in, c_out / groups, k...]
  ConvTransposeOptions options;
  bool bias = true;
};

inline std::vector<TransposeCase> transpose_cases() {
  return {
      {"1d", {2, 4, 7}, {4, 3, 3}, {{2}, {1}, {1}, {1}, 1}},
      {"1d groups dilation", {2, 6, 5}, {6, 2, 3}, {{3}, {0}, {0}, {2}, 3}, false},
      {"2d", {2, 3, 5, 6}, {3, 4, 3, 3}, {{1, 1}, {1, 1}, {0, 0}, {1, 1}, 1}},
      {"2d stride padding_out", {2, 4, 4, 5}, {4, 3, 3, 2}, {{2, 3}, {1, 0}, {1, 2}, {1, 1}, 2}},
      {"2d stride 2 dilation 2", {1, 2, 5, 5}, {2, 2, 3, 3}, {{2, 2}, {0, 1}, {1, 0}, {2, 2}, 1}},
      {"2d stride 4 dilation 6", {2, 3, 3, 4}, {3, 2, 3, 2}, {{4, 4}, {2, 1}, {3, 0}, {6, 2}, 1}},
      {"3d", {2, 4, 3, 4, 3}, {4, 2, 2, 3, 2}, {{2, 1, 2}, {0, 1, 1}, {1, 0, 0}, {1, 2, 1}, 2}},
      {"pointwise", {2, 5, 4, 4}, {5, 3, 1, 1}, {}},
      {"batch 0", {0, 4, 5, 5}, {4, 2, 3, 3}, {{1, 1}, {1, 1}, {0, 0}, {1, 1}, 1}},
      {"64 channels 3x3", {2, 64, 14, 14}, {64, 64, 3, 3}, {{1, 1}, {1, 1}, {0, 0}, {1, 1}, 1}},
  };
}

}  // namespace gpu_conv
