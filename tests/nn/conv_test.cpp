// Conv1d, Conv2d and ConvTranspose2d against float64 loops of their definitions, with strides,
// padding, dilation and groups; PyTorch's parameter names, shapes and initial bounds.
#include <kiln/nn/conv.h>

#include "nn/layer_test_util.h"

namespace kiln::nn {
namespace {

using testing::kCpu;

struct Geometry {
  std::int64_t n, c, h, w;              // input
  std::int64_t o, kh, kw;               // output channels, kernel
  std::int64_t s0, s1, p0, p1, d0, d1;  // stride, padding, dilation
  std::int64_t groups;
};

// out[n, o, i, j] = b[o] + sum over the group's input channels and the kernel of
// x[n, c, i * s - p + a * d, j * s - p + e * d] * w[o, c - group start, a, e].
std::vector<double> conv2d_reference(const Geometry& g, const std::vector<double>& x,
                                     const std::vector<double>& w, const std::vector<double>& b,
                                     std::int64_t& ho, std::int64_t& wo) {
  ho = (g.h + 2 * g.p0 - g.d0 * (g.kh - 1) - 1) / g.s0 + 1;
  wo = (g.w + 2 * g.p1 - g.d1 * (g.kw - 1) - 1) / g.s1 + 1;
  const std::int64_t cpg = g.c / g.groups, opg = g.o / g.groups;
  std::vector<double> out(static_cast<std::size_t>(g.n * g.o * ho * wo));
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t o = 0; o < g.o; ++o)
      for (std::int64_t i = 0; i < ho; ++i)
        for (std::int64_t j = 0; j < wo; ++j) {
          double acc = b.empty() ? 0.0 : b[o];
          const std::int64_t group = o / opg;
          for (std::int64_t c = 0; c < cpg; ++c)
            for (std::int64_t a = 0; a < g.kh; ++a)
              for (std::int64_t e = 0; e < g.kw; ++e) {
                const std::int64_t r = i * g.s0 - g.p0 + a * g.d0;
                const std::int64_t q = j * g.s1 - g.p1 + e * g.d1;
                if (r < 0 || r >= g.h || q < 0 || q >= g.w) continue;
                acc += x[((n * g.c + group * cpg + c) * g.h + r) * g.w + q] *
                       w[((o * cpg + c) * g.kh + a) * g.kw + e];
              }
          out[((n * g.o + o) * ho + i) * wo + j] = acc;
        }
  return out;
}

TEST(NnConv, Conv2dNamesAndShapesFollowPyTorch) {
  // torch.nn.Conv2d(4, 8, (3, 5), groups=2): weight (8, 2, 3, 5), bias (8).
  const Conv2d conv =
      Conv2dConfig{.in_channels = 4, .out_channels = 8, .kernel_size = {3, 5}, .groups = 2}.init(
          kCpu);
  EXPECT_EQ(testing::names(conv), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(testing::shapes(conv), (std::vector<std::vector<std::int64_t>>{{8, 2, 3, 5}, {8}}));
  const Conv2d plain =
      Conv2dConfig{.in_channels = 4, .out_channels = 8, .kernel_size = {3, 3}, .bias = false}.init(
          kCpu);
  EXPECT_EQ(testing::names(plain), (std::vector<std::string>{"weight"}));
}

TEST(NnConv, Conv2dMatchesItsDefinitionWithStridePaddingDilationGroups) {
  const Geometry g{2, 4, 7, 9, 6, 3, 2, 2, 1, 1, 2, 1, 2, 2};
  const Conv2d conv = testing::to_f64(Conv2dConfig{.in_channels = 4,
                                                   .out_channels = 6,
                                                   .kernel_size = {3, 2},
                                                   .stride = {2, 1},
                                                   .padding = {1, 2},
                                                   .dilation = {1, 2},
                                                   .groups = 2}
                                          .init(kCpu));
  const std::vector<double> x = testing::values(static_cast<std::size_t>(g.n * g.c * g.h * g.w), 1);
  std::int64_t ho = 0, wo = 0;
  const std::vector<double> want =
      conv2d_reference(g, x, testing::param(conv, "weight"), testing::param(conv, "bias"), ho, wo);
  const Tensor<4> y = conv.forward(testing::tensor<4>(x, {g.n, g.c, g.h, g.w}));
  EXPECT_EQ(y.shape(), (Shape{g.n, g.o, ho, wo}));
  testing::expect_near(testing::read(y), want, 1e-12);
}

TEST(NnConv, Conv2dWithoutBiasInFloat32) {
  const Geometry g{1, 3, 5, 5, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1};
  const Conv2d conv = Conv2dConfig{.in_channels = 3,
                                   .out_channels = 2,
                                   .kernel_size = {3, 3},
                                   .padding = {1, 1},
                                   .bias = false}
                          .init(kCpu);
  const std::vector<double> x = testing::values(75, 2);
  std::int64_t ho = 0, wo = 0;
  const std::vector<double> want =
      conv2d_reference(g, x, testing::param(conv, "weight"), {}, ho, wo);
  const Tensor<4> y = conv.forward(testing::tensor<4>(x, {1, 3, 5, 5}, kCpu, true));
  EXPECT_EQ(y.dtype(), DType::F32);
  testing::expect_near(testing::read(y), want, 1e-5);
}

TEST(NnConv, Conv1dMatchesItsDefinition) {
  // A 1-D convolution is the 2-D one over a height of 1.
  const Conv1d conv = testing::to_f64(Conv1dConfig{.in_channels = 6,
                                                   .out_channels = 3,
                                                   .kernel_size = 3,
                                                   .stride = 2,
                                                   .padding = 2,
                                                   .dilation = 2,
                                                   .groups = 3}
                                          .init(kCpu));
  EXPECT_EQ(testing::names(conv), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(testing::shapes(conv), (std::vector<std::vector<std::int64_t>>{{3, 2, 3}, {3}}));
  const Geometry g{2, 6, 1, 11, 3, 1, 3, 1, 2, 0, 2, 1, 2, 3};
  const std::vector<double> x = testing::values(2 * 6 * 11, 3);
  std::int64_t ho = 0, wo = 0;
  const std::vector<double> want =
      conv2d_reference(g, x, testing::param(conv, "weight"), testing::param(conv, "bias"), ho, wo);
  const Tensor<3> y = conv.forward(testing::tensor<3>(x, {2, 6, 11}));
  EXPECT_EQ(y.shape(), (Shape{2, 3, wo}));
  testing::expect_near(testing::read(y), want, 1e-12);
}

TEST(NnConv, ConvTranspose2dMatchesItsDefinition) {
  // torch.nn.ConvTranspose2d(4, 6, (3, 2), groups=2): weight (4, 3, 3, 2), bias (6).
  const std::int64_t n = 2, c = 4, h = 3, w = 4, o = 6, kh = 3, kw = 2, groups = 2;
  const std::int64_t s[2] = {2, 1}, p[2] = {1, 0}, op[2] = {1, 0}, d[2] = {1, 2};
  const ConvTranspose2d conv =
      testing::to_f64(ConvTranspose2dConfig{.in_channels = c,
                                            .out_channels = o,
                                            .kernel_size = {kh, kw},
                                            .stride = {s[0], s[1]},
                                            .padding = {p[0], p[1]},
                                            .output_padding = {op[0], op[1]},
                                            .dilation = {d[0], d[1]},
                                            .groups = groups}
                          .init(kCpu));
  EXPECT_EQ(testing::names(conv), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(testing::shapes(conv), (std::vector<std::vector<std::int64_t>>{{4, 3, 3, 2}, {6}}));
  const std::vector<double> x = testing::values(static_cast<std::size_t>(n * c * h * w), 4);
  const std::vector<double> weight = testing::param(conv, "weight");
  const std::vector<double> bias = testing::param(conv, "bias");
  // Each input element scatters x * w into out[i * s - p + a * d, j * s - p + e * d].
  const std::int64_t ho = (h - 1) * s[0] - 2 * p[0] + d[0] * (kh - 1) + op[0] + 1;
  const std::int64_t wo = (w - 1) * s[1] - 2 * p[1] + d[1] * (kw - 1) + op[1] + 1;
  const std::int64_t cpg = c / groups, opg = o / groups;
  std::vector<double> want(static_cast<std::size_t>(n * o * ho * wo));
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t oc = 0; oc < o; ++oc)
      for (std::int64_t i = 0; i < ho * wo; ++i) want[(b * o + oc) * ho * wo + i] = bias[oc];
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t ic = 0; ic < c; ++ic)
      for (std::int64_t i = 0; i < h; ++i)
        for (std::int64_t j = 0; j < w; ++j)
          for (std::int64_t oc = 0; oc < opg; ++oc)
            for (std::int64_t a = 0; a < kh; ++a)
              for (std::int64_t e = 0; e < kw; ++e) {
                const std::int64_t r = i * s[0] - p[0] + a * d[0];
                const std::int64_t q = j * s[1] - p[1] + e * d[1];
                if (r < 0 || r >= ho || q < 0 || q >= wo) continue;
                const std::int64_t out_channel = (ic / cpg) * opg + oc;
                want[((b * o + out_channel) * ho + r) * wo + q] +=
                    x[((b * c + ic) * h + i) * w + j] * weight[((ic * opg + oc) * kh + a) * kw + e];
              }
  const Tensor<4> y = conv.forward(testing::tensor<4>(x, {n, c, h, w}));
  EXPECT_EQ(y.shape(), (Shape{n, o, ho, wo}));
  testing::expect_near(testing::read(y), want, 1e-12);
}

TEST(NnConv, DefaultInitialisationStaysWithinPyTorchBounds) {
  kCpu.seed(11);
  auto max_abs = [](const std::vector<double>& v) {
    double m = 0;
    for (double x : v) m = std::max(m, std::abs(x));
    return m;
  };
  // Conv2d: fan_in = in / groups * kh * kw = 4 / 2 * 3 * 3 = 18.
  const Conv2d conv =
      Conv2dConfig{.in_channels = 4, .out_channels = 64, .kernel_size = {3, 3}, .groups = 2}.init(
          kCpu);
  const double bound = 1.0 / std::sqrt(18.0);
  EXPECT_LE(max_abs(testing::param(conv, "weight")), bound);
  EXPECT_GT(max_abs(testing::param(conv, "weight")), 0.95 * bound);
  EXPECT_LE(max_abs(testing::param(conv, "bias")), bound);
  EXPECT_GT(max_abs(testing::param(conv, "bias")), 0.5 * bound);
  // ConvTranspose2d: fan_in from weight [in, out / groups, k...] = out / groups * kh * kw = 8 * 4.
  const ConvTranspose2d up =
      ConvTranspose2dConfig{
          .in_channels = 32, .out_channels = 16, .kernel_size = {2, 2}, .groups = 2}
          .init(kCpu);
  const double up_bound = 1.0 / std::sqrt(32.0);
  EXPECT_LE(max_abs(testing::param(up, "weight")), up_bound);
  EXPECT_GT(max_abs(testing::param(up, "weight")), 0.95 * up_bound);
  EXPECT_LE(max_abs(testing::param(up, "bias")), up_bound);
}

TEST(NnConv, BadConfigurationsAndInputsThrow) {
  EXPECT_THROW(
      Conv2dConfig({.in_channels = 3, .out_channels = 4, .kernel_size = {3, 3}, .groups = 2})
          .init(kCpu),
      InvalidArgument);
  EXPECT_THROW(
      Conv2dConfig({.in_channels = 4, .out_channels = 4, .kernel_size = {0, 3}}).init(kCpu),
      InvalidArgument);
  EXPECT_THROW(
      Conv1dConfig({.in_channels = 2, .out_channels = 2, .kernel_size = 3, .stride = 0}).init(kCpu),
      InvalidArgument);
  EXPECT_THROW(
      ConvTranspose2dConfig(
          {.in_channels = 2, .out_channels = 2, .kernel_size = {3, 3}, .output_padding = {1, 1}})
          .init(kCpu),
      InvalidArgument);
  const Conv2d conv =
      Conv2dConfig{.in_channels = 3, .out_channels = 4, .kernel_size = {3, 3}}.init(kCpu);
  EXPECT_THROW(conv.forward(Tensor<4>::zeros({1, 2, 5, 5}, kCpu)), Error);
}

}  // namespace
}  // namespace kiln::nn
