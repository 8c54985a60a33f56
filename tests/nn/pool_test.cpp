// MaxPool2d, AvgPool2d and AdaptiveAvgPool2d against float64 loops of PyTorch's definitions
// (output sizes, ceil_mode, padding, dilation, count_include_pad).
#include <kiln/nn/pool.h>

#include <limits>

#include "nn/layer_test_util.h"

namespace kiln::nn {
namespace {

using testing::kCpu;

struct Window {
  std::int64_t k, s, p, d;
  bool ceil_mode;
};

// PyTorch's pooling output length, the last window starting inside the input or left padding.
std::int64_t pooled_length(std::int64_t in, const Window& w) {
  const std::int64_t span = in + 2 * w.p - w.d * (w.k - 1) - 1;
  std::int64_t out = (w.ceil_mode ? (span + w.s - 1) / w.s : span / w.s) + 1;
  if (w.ceil_mode && (out - 1) * w.s >= in + w.p) --out;
  return out;
}

std::vector<double> max_pool_reference(const std::vector<double>& x, std::int64_t planes,
                                       std::int64_t h, std::int64_t w, const Window& wh,
                                       const Window& ww, std::int64_t& ho, std::int64_t& wo) {
  ho = pooled_length(h, wh);
  wo = pooled_length(w, ww);
  std::vector<double> out;
  for (std::int64_t p = 0; p < planes; ++p)
    for (std::int64_t i = 0; i < ho; ++i)
      for (std::int64_t j = 0; j < wo; ++j) {
        double best = -std::numeric_limits<double>::infinity();
        for (std::int64_t a = 0; a < wh.k; ++a)
          for (std::int64_t e = 0; e < ww.k; ++e) {
            const std::int64_t r = i * wh.s - wh.p + a * wh.d, q = j * ww.s - ww.p + e * ww.d;
            if (r >= 0 && r < h && q >= 0 && q < w) best = std::max(best, x[(p * h + r) * w + q]);
          }
        out.push_back(best);
      }
  return out;
}

std::vector<double> avg_pool_reference(const std::vector<double>& x, std::int64_t planes,
                                       std::int64_t h, std::int64_t w, const Window& wh,
                                       const Window& ww, bool count_include_pad, std::int64_t& ho,
                                       std::int64_t& wo) {
  ho = pooled_length(h, wh);
  wo = pooled_length(w, ww);
  std::vector<double> out;
  for (std::int64_t p = 0; p < planes; ++p)
    for (std::int64_t i = 0; i < ho; ++i)
      for (std::int64_t j = 0; j < wo; ++j) {
        // The window clipped to the padded input counts padding; clipped to the input, not.
        std::int64_t r0 = i * wh.s - wh.p, r1 = std::min(r0 + wh.k, h + wh.p);
        std::int64_t q0 = j * ww.s - ww.p, q1 = std::min(q0 + ww.k, w + ww.p);
        const std::int64_t padded_count = (r1 - r0) * (q1 - q0);
        r0 = std::max<std::int64_t>(r0, 0);
        q0 = std::max<std::int64_t>(q0, 0);
        r1 = std::min(r1, h);
        q1 = std::min(q1, w);
        double sum = 0;
        for (std::int64_t r = r0; r < r1; ++r)
          for (std::int64_t q = q0; q < q1; ++q) sum += x[(p * h + r) * w + q];
        out.push_back(
            sum / static_cast<double>(count_include_pad ? padded_count : (r1 - r0) * (q1 - q0)));
      }
  return out;
}

TEST(NnPool, MaxPool2dMatchesItsDefinition) {
  const std::vector<double> x = testing::values(2 * 3 * 7 * 8, 5);
  const Tensor<4> input = testing::tensor<4>(x, {2, 3, 7, 8});
  {
    // Defaults: stride = kernel, no padding.
    std::int64_t ho = 0, wo = 0;
    const auto want =
        max_pool_reference(x, 6, 7, 8, {2, 2, 0, 1, false}, {2, 2, 0, 1, false}, ho, wo);
    const Tensor<4> y = MaxPool2d{.kernel_size = {2, 2}}.forward(input);
    EXPECT_EQ(y.shape(), (Shape{2, 3, 3, 4}));
    testing::expect_near(testing::read(y), want, 0);
  }
  {
    std::int64_t ho = 0, wo = 0;
    const Window wh{3, 2, 1, 1, true}, ww{2, 1, 1, 2, true};
    const auto want = max_pool_reference(x, 6, 7, 8, wh, ww, ho, wo);
    const Tensor<4> y = MaxPool2d{.kernel_size = {3, 2},
                                  .stride = {{2, 1}},
                                  .padding = {1, 1},
                                  .dilation = {1, 2},
                                  .ceil_mode = true}
                            .forward(input);
    EXPECT_EQ(y.shape(), (Shape{2, 3, ho, wo}));
    testing::expect_near(testing::read(y), want, 0);
  }
}

TEST(NnPool, AvgPool2dMatchesItsDefinitionWithAndWithoutPaddingInTheCount) {
  const std::vector<double> x = testing::values(1 * 2 * 7 * 6, 6);
  const Tensor<4> input = testing::tensor<4>(x, {1, 2, 7, 6});
  const Window wh{3, 2, 1, 1, true}, ww{2, 2, 1, 1, true};
  for (bool include : {true, false}) {
    std::int64_t ho = 0, wo = 0;
    const auto want = avg_pool_reference(x, 2, 7, 6, wh, ww, include, ho, wo);
    const Tensor<4> y = AvgPool2d{.kernel_size = {3, 2},
                                  .stride = {{2, 2}},
                                  .padding = {1, 1},
                                  .ceil_mode = true,
                                  .count_include_pad = include}
                            .forward(input);
    EXPECT_EQ(y.shape(), (Shape{1, 2, ho, wo})) << include;
    testing::expect_near(testing::read(y), want, 1e-12, include ? "include pad" : "exclude pad");
  }
  std::int64_t ho = 0, wo = 0;
  const auto want =
      avg_pool_reference(x, 2, 7, 6, {2, 2, 0, 1, false}, {3, 3, 0, 1, false}, true, ho, wo);
  testing::expect_near(testing::read(AvgPool2d{.kernel_size = {2, 3}}.forward(input)), want, 1e-12);
}

TEST(NnPool, AdaptiveAvgPool2dAveragesPyTorchsWindows) {
  const std::int64_t h = 7, w = 5, oh = 3, ow = 2;
  const std::vector<double> x = testing::values(2 * 3 * h * w, 7);
  std::vector<double> want;
  for (std::int64_t p = 0; p < 6; ++p)
    for (std::int64_t i = 0; i < oh; ++i)
      for (std::int64_t j = 0; j < ow; ++j) {
        // [floor(i * in / out), ceil((i + 1) * in / out))
        const std::int64_t r0 = i * h / oh, r1 = ((i + 1) * h + oh - 1) / oh;
        const std::int64_t q0 = j * w / ow, q1 = ((j + 1) * w + ow - 1) / ow;
        double sum = 0;
        for (std::int64_t r = r0; r < r1; ++r)
          for (std::int64_t q = q0; q < q1; ++q) sum += x[(p * h + r) * w + q];
        want.push_back(sum / static_cast<double>((r1 - r0) * (q1 - q0)));
      }
  const Tensor<4> y =
      AdaptiveAvgPool2d{.output_size = {oh, ow}}.forward(testing::tensor<4>(x, {2, 3, h, w}));
  EXPECT_EQ(y.shape(), (Shape{2, 3, oh, ow}));
  testing::expect_near(testing::read(y), want, 1e-12);
  // Pools have no parameters.
  EXPECT_TRUE(testing::names(AdaptiveAvgPool2d{.output_size = {1, 1}}).empty());
  EXPECT_TRUE(testing::names(MaxPool2d{.kernel_size = {2, 2}}).empty());
}

TEST(NnPool, BadOptionsThrow) {
  const Tensor<4> x = Tensor<4>::zeros({1, 1, 4, 4}, kCpu);
  EXPECT_THROW((MaxPool2d{.kernel_size = {0, 2}}.forward(x)), Error);
  EXPECT_THROW(MaxPool2d({.kernel_size = {2, 2}, .padding = {2, 2}}).forward(x), Error);
  EXPECT_THROW((AvgPool2d{.kernel_size = {5, 5}}.forward(x)), Error);
}

}  // namespace
}  // namespace kiln::nn
