// conv, conv_transpose and the convolution gradients on the GPU (im2col / col2im kernels around
// cuBLASLt, cuda_conv.cpp) against the CPU backend on the same random data: 1d, 2d and 3d
// windows with groups, stride, padding, dilation and output padding; pointwise windows (which
// read the image directly); permuted, flipped, strided and offset views of the input, the
// weight and the output gradient; an empty batch; every float dtype. Skips without a GPU.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gpu/gpu_test_support.h"
#include "kiln/detail/tensor_ops.h"
#include "runtime/registry.h"

using namespace kiln;

namespace {

using test::Build;
using test::kFloatDTypes;
using test::on;

// Conv results are finite: unlike test::expect_near_all, a NaN (or an infinity) fails even where
// the CPU has one too.
void expect_near_all_finite(const TensorData& got, const TensorData& want, double tolerance,
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
void expect_same_finite(const Device& gpu, const Build& build, double tolerance,
                        const std::string& what) {
  const TensorData got = detail::into_data(build(gpu));
  const TensorData want = detail::into_data(build(Device::cpu()));
  expect_near_all_finite(got, want, tolerance, what);
}

// Uniform in [-1, 1) on the CPU, as dtype (the same values on both devices once moved).
Primitive host_random(const Shape& shape, DType dtype, std::uint64_t seed) {
  Device::cpu().seed(seed);
  Primitive p =
      detail::random(shape, Distribution::uniform(-1, 1), DType::F64, Device::cpu(), Kind::Float);
  return detail::from_data(detail::into_data(p).convert(dtype), Device::cpu(), Kind::Float,
                           shape.rank());
}

// Relative to 1 + |expected|. Sums of up to a few hundred products of values in [-1, 1); the
// 16-bit floats: the GPU rounds the product before adding the bias (conv) or the products
// before col2im sums them (conv_transpose), the CPU once at the end.
double conv_tolerance(DType dtype) {
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

std::vector<ConvCase> conv_cases() {
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
std::vector<std::pair<std::string, View>> views(std::uint64_t& seed, DType dtype,
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

}  // namespace

TEST(GpuConv, ConvMatchesCpu) {
  KILN_REQUIRE_GPU();
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

struct TransposeCase {
  std::string name;
  Shape x, w;  // x [n, c_in, ...], w [c_in, c_out / groups, k...]
  ConvTransposeOptions options;
  bool bias = true;
};

TEST(GpuConv, ConvTransposeMatchesCpu) {
  KILN_REQUIRE_GPU();
  const std::vector<TransposeCase> cases = {
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
  std::uint64_t seed = 4000;
  for (DType dtype : kFloatDTypes) {
    // Weight gradients sum over images and positions: more terms than the forward.
    const double tol = conv_tolerance(dtype) * (dtype == DType::F64 ? 1 : 2);
    for (const ConvCase& c : conv_cases()) {
      Primitive x = host_random(c.x, dtype, seed++);
      Primitive w = host_random(c.w, dtype, seed++);
      const Shape y_shape =
          detail::into_data(backend_for(Device::cpu()).conv(x, w, std::nullopt, c.options)).shape();
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
