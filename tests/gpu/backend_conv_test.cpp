// conv, conv_transpose and the convolution gradients on the GPU through kiln's own path
// (KILN_CONV=kiln: im2col / col2im kernels around cuBLASLt, cuda_conv.cpp) against the CPU
// backend on the same random data: 1d, 2d and 3d windows with groups, stride, padding, dilation
// and output padding; pointwise windows (which read the image directly); permuted, flipped,
// strided and offset views of the input, the weight and the output gradient; an empty batch;
// every float dtype. Skips without a GPU. The same cases through cuDNN:
// backend_conv_cudnn_test.cpp.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gpu/conv_cases.h"
#include "gpu/gpu_test_support.h"
#include "kiln/detail/tensor_ops.h"
#include "runtime/registry.h"
#include "support/scoped_env.h"

using namespace kiln;

namespace {

using gpu_conv::conv_cases;
using gpu_conv::conv_tolerance;
using gpu_conv::ConvCase;
using gpu_conv::expect_same_finite;
using gpu_conv::gradient_inputs;
using gpu_conv::gradient_tolerance;
using gpu_conv::host_random;
using gpu_conv::transpose_cases;
using gpu_conv::TransposeCase;
using gpu_conv::views;
using test::kFloatDTypes;
using test::on;
using test::ScopedEnv;

}  // namespace

TEST(GpuConv, ConvMatchesCpu) {
  KILN_REQUIRE_GPU();
  const ScopedEnv path("KILN_CONV", "kiln");
  std::uint64_t seed = 1000;
  for (DType dtype : kFloatDTypes) {
    const double tol = conv_tolerance(dtype);
    for (const ConvCase& c : conv_cases()) {
      Primitive w = host_random(c.w, dtype, seed++);
      Primitive b = host_random(Shape{c.w[0]}, dtype, seed++);
      for (const auto& [view_name, x] : views(seed, dtype, c.x)) {
        expect_same_finite(
            device,
            [&](Device d) {
              return backend_for(d).conv(
                  x(d), on(w, d), c.bias ? OptionalPrimitive(on(b, d)) : std::nullopt, c.options);
            },
            tol, std::string(dtype_name(dtype)) + " " + c.name + " (" + view_name + ")");
      }
    }
  }
}

TEST(GpuConv, ConvWeightViewsAndBiasViews) {
  KILN_REQUIRE_GPU();
  const ScopedEnv path("KILN_CONV", "kiln");
  std::uint64_t seed = 2000;
  for (DType dtype : kFloatDTypes) {
    const double tol = conv_tolerance(dtype);
    Primitive x = host_random({2, 4, 8, 7}, dtype, seed++);
    Primitive wt = host_random({4, 6, 3, 3}, dtype, seed++);   // [in, out, k, k]: swapped below
    Primitive bias_source = host_random({13}, dtype, seed++);  // bias: stride 2, offset 1
    const ConvOptions options{{1, 2}, {1, 0}, {1, 1}, 1};
    expect_same_finite(
        device,
        [&](Device d) {
          return backend_for(d).conv(on(x, d), detail::swap_dims(on(wt, d), 0, 1),
                                     detail::slice(on(bias_source, d), {Slice(1, std::nullopt, 2)}),
                                     options);
        },
        tol, std::string(dtype_name(dtype)) + " transposed weight, strided bias");
    // A weight at an odd offset (a slice of a bigger one), f16/bf16 pointers 2-byte aligned.
    Primitive big = host_random({7, 4, 3, 3}, dtype, seed++);
    expect_same_finite(
        device,
        [&](Device d) {
          return backend_for(d).conv(on(x, d), detail::narrow(on(big, d), 0, 1, 5), std::nullopt,
                                     ConvOptions{{1, 1}, {1, 1}, {1, 1}, 1});
        },
        tol, std::string(dtype_name(dtype)) + " offset weight");
  }
}

TEST(GpuConv, ConvTransposeMatchesCpu) {
  KILN_REQUIRE_GPU();
  const ScopedEnv path("KILN_CONV", "kiln");
  const std::vector<TransposeCase> cases = transpose_cases();
  std::uint64_t seed = 3000;
  for (DType dtype : kFloatDTypes) {
    const double tol = conv_tolerance(dtype);
    for (const TransposeCase& c : cases) {
      Primitive w = host_random(c.w, dtype, seed++);
      Primitive b = host_random(Shape{c.w[1] * c.options.groups}, dtype, seed++);
      for (const auto& [view_name, x] : views(seed, dtype, c.x)) {
        expect_same_finite(
            device,
            [&](Device d) {
              return backend_for(d).conv_transpose(
                  x(d), on(w, d), c.bias ? OptionalPrimitive(on(b, d)) : std::nullopt, c.options);
            },
            tol, std::string(dtype_name(dtype)) + " " + c.name + " (" + view_name + ")");
      }
    }
  }
}

// The gradients as the autodiff calls them: conv_x_backward (the default, through the GPU's
// conv_transpose), conv_weight_backward (overridden) and conv_bias_backward (the default sum).
TEST(GpuConv, GradientsMatchCpu) {
  KILN_REQUIRE_GPU();
  const ScopedEnv path("KILN_CONV", "kiln");
  std::uint64_t seed = 4000;
  for (DType dtype : kFloatDTypes) {
    const double tol = gradient_tolerance(dtype);
    for (const ConvCase& c : conv_cases()) {
      const auto [x, w, y_shape] = gradient_inputs(c, dtype, seed);
      Primitive g = host_random(y_shape, dtype, seed++);
      const std::string name = std::string(dtype_name(dtype)) + " " + c.name;
      expect_same_finite(
          device,
          [&](Device d) {
            return backend_for(d).conv_x_backward(on(x, d), on(w, d), on(g, d), c.options);
          },
          tol, name + " dx");
      expect_same_finite(
          device,
          [&](Device d) {
            return backend_for(d).conv_weight_backward(on(x, d), on(w, d), on(g, d), c.options);
          },
          tol, name + " dw");
      // The output gradient as views (dy copied to [channels, images, positions]), x flipped
      // along the channels.
      for (const auto& [view_name, dy] : views(seed, dtype, y_shape)) {
        expect_same_finite(
            device,
            [&](Device d) {
              return backend_for(d).conv_weight_backward(detail::flip(on(x, d), {1}), on(w, d),
                                                         dy(d), c.options);
            },
            tol, name + " dw (dy " + view_name + ")");
      }
      expect_same_finite(
          device, [&](Device d) { return backend_for(d).conv_bias_backward(on(g, d)); }, tol,
          name + " db");
    }
  }
}

// One image: dy [1, c, positions...] is already [c, positions] (used as a view, no copy).
TEST(GpuConv, WeightGradientOfOneImage) {
  KILN_REQUIRE_GPU();
  const ScopedEnv path("KILN_CONV", "kiln");
  std::uint64_t seed = 5000;
  for (DType dtype : kFloatDTypes) {
    Primitive x = host_random({1, 4, 9, 9}, dtype, seed++);
    Primitive w = host_random({6, 2, 3, 3}, dtype, seed++);
    const ConvOptions options{{2, 1}, {1, 1}, {1, 2}, 2};
    Primitive g = host_random({1, 6, 5, 7}, dtype, seed++);
    expect_same_finite(
        device,
        [&](Device d) {
          return backend_for(d).conv_weight_backward(on(x, d), on(w, d), on(g, d), options);
        },
        conv_tolerance(dtype) * 2, std::string(dtype_name(dtype)) + " one image");
  }
}
