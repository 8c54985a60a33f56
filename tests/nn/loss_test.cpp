// Losses against hand-computed values and float64 loops of PyTorch's definitions (class
// weights, label smoothing, ignore_index, pos_weight, reductions), plus their gradients.
#include <kiln/nn/loss.h>

#include <limits>

#include "nn/layer_test_util.h"

namespace kiln::nn {
namespace {

using testing::kCpu;

double scalar(const Tensor<1>& t) {
  EXPECT_EQ(t.shape(), (Shape{1}));
  return testing::read(t).at(0);
}

TEST(NnLoss, RegressionLossesByHand) {
  const Tensor<1> input = testing::tensor<1>({1, 2, 3}, {3});
  const Tensor<1> target = testing::tensor<1>({1, 0, 5}, {3});
  // Differences 0, 2, -2.
  EXPECT_DOUBLE_EQ(scalar(mse_loss(input, target)), 8.0 / 3.0);
  EXPECT_DOUBLE_EQ(scalar(mse_loss(input, target, Reduction::Sum)), 8.0);
  EXPECT_EQ(testing::read(mse_loss_unreduced(input, target)), (std::vector<double>{0, 4, 4}));
  EXPECT_DOUBLE_EQ(scalar(l1_loss(input, target)), 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(scalar(l1_loss(input, target, Reduction::Sum)), 4.0);
  // Huber, delta 1: 0, then 1 * (2 - 0.5) twice; delta 3: 0, 2, 2 (quadratic).
  EXPECT_EQ(testing::read(huber_loss_unreduced(input, target)), (std::vector<double>{0, 1.5, 1.5}));
  EXPECT_DOUBLE_EQ(scalar(huber_loss(input, target)), 1.0);
  EXPECT_DOUBLE_EQ(scalar(huber_loss(input, target, 3.0, Reduction::Sum)), 4.0);
}

TEST(NnLoss, RegressionLossesMatchLoops) {
  const std::vector<double> a = testing::values(60, 1, -3, 3), b = testing::values(60, 2, -3, 3);
  const Tensor<3> x = testing::tensor<3>(a, {3, 4, 5}), y = testing::tensor<3>(b, {3, 4, 5});
  double mse = 0, l1 = 0, huber = 0;
  const double delta = 0.7;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = a[i] - b[i];
    mse += d * d;
    l1 += std::abs(d);
    huber += std::abs(d) < delta ? 0.5 * d * d : delta * (std::abs(d) - 0.5 * delta);
  }
  EXPECT_NEAR(scalar(mse_loss(x, y)), mse / 60, 1e-12);
  EXPECT_NEAR(scalar(l1_loss(x, y, Reduction::Sum)), l1, 1e-12);
  EXPECT_NEAR(scalar(huber_loss(x, y, delta)), huber / 60, 1e-12);
  EXPECT_THROW(mse_loss(x, testing::tensor<3>(b, {3, 5, 4})), ShapeMismatch);
  EXPECT_THROW(huber_loss(x, y, 0.0), InvalidArgument);
}

TEST(NnLoss, CrossEntropyByHand) {
  // softmax(0, ln 3) = (1/4, 3/4).
  const Tensor<2> logits = testing::tensor<2>({0, std::log(3.0), 0, std::log(3.0)}, {2, 2});
  const Tensor<1, Int> target = testing::int_tensor<1>({1, 0}, {2});
  testing::expect_near(testing::read(cross_entropy_unreduced(logits, target)),
                       {std::log(4.0 / 3.0), std::log(4.0)}, 1e-12);
  EXPECT_NEAR(scalar(cross_entropy(logits, target)), 0.5 * (std::log(4.0 / 3.0) + std::log(4.0)),
              1e-12);
  // Class weights 1 and 3: (3 log(4/3) + 1 log 4) / (3 + 1).
  const CrossEntropyOptions weighted{.weight = testing::tensor<1>({1, 3}, {2})};
  EXPECT_NEAR(scalar(cross_entropy(logits, target, weighted)),
              (3 * std::log(4.0 / 3.0) + std::log(4.0)) / 4, 1e-12);
  // ignore_index: only the first sample counts.
  const Tensor<1, Int> ignoring = testing::int_tensor<1>({1, -100}, {2});
  EXPECT_NEAR(scalar(cross_entropy(logits, ignoring)), std::log(4.0 / 3.0), 1e-12);
  testing::expect_near(testing::read(cross_entropy_unreduced(logits, ignoring)),
                       {std::log(4.0 / 3.0), 0.0}, 1e-12);
  // Smoothing 0.2 over 2 classes: target (0.1, 0.9) for class 1.
  const CrossEntropyOptions smooth{.label_smoothing = 0.2};
  EXPECT_NEAR(testing::read(cross_entropy_unreduced(logits, target, smooth))[0],
              -(0.1 * std::log(0.25) + 0.9 * std::log(0.75)), 1e-12);
}

// PyTorch's cross entropy over logits [n, c, l] (l = 1 for [n, c]).
struct CeCase {
  std::vector<double> weight;  // empty: none
  std::int64_t ignore_index = -100;
  double smoothing = 0;
};

std::vector<double> cross_entropy_reference(const std::vector<double>& logits,
                                            const std::vector<std::int64_t>& target, std::int64_t n,
                                            std::int64_t c, std::int64_t l, const CeCase& k,
                                            double& mean) {
  std::vector<double> losses;
  double total = 0, weights = 0;
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t p = 0; p < l; ++p) {
      const std::int64_t t = target[i * l + p];
      if (t == k.ignore_index) {
        losses.push_back(0.0);
        continue;
      }
      double top = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < c; ++j) top = std::max(top, logits[(i * c + j) * l + p]);
      double sum = 0;
      for (std::int64_t j = 0; j < c; ++j) sum += std::exp(logits[(i * c + j) * l + p] - top);
      auto log_p = [&](std::int64_t j) {
        return logits[(i * c + j) * l + p] - top - std::log(sum);
      };
      auto w = [&](std::int64_t j) { return k.weight.empty() ? 1.0 : k.weight[j]; };
      double smooth = 0;
      for (std::int64_t j = 0; j < c; ++j) smooth -= w(j) * log_p(j);
      const double loss = (1 - k.smoothing) * -w(t) * log_p(t) + k.smoothing / c * smooth;
      losses.push_back(loss);
      total += loss;
      weights += w(t);
    }
  mean = total / weights;
  return losses;
}

TEST(NnLoss, CrossEntropyMatchesLoopsWithWeightsSmoothingAndIgnoredTargets) {
  const std::int64_t n = 4, c = 5, l = 3;
  const std::vector<double> logits = testing::values(n * c * l, 3, -4, 4);
  const std::vector<std::int64_t> target = {0, 4, 2, 3, -1, 1, 4, 4, 0, 2, -1, 3};
  const std::vector<double> weight = {0.5, 1.0, 2.0, 0.25, 1.5};
  const CeCase cases[] = {
      {}, {weight}, {{}, -1, 0.0}, {weight, -1, 0.0}, {{}, -1, 0.3}, {weight, -1, 0.15}};
  for (const CeCase& k : cases) {
    CrossEntropyOptions options{.ignore_index = k.ignore_index, .label_smoothing = k.smoothing};
    if (!k.weight.empty()) options.weight = testing::tensor<1>(k.weight, {c});
    const std::string what = "weights " + std::to_string(!k.weight.empty()) + " ignore " +
                             std::to_string(k.ignore_index) + " smoothing " +
                             std::to_string(k.smoothing);
    if (k.ignore_index == -100) {
      // No -100 among the targets: the -1s are classes out of range.
      EXPECT_THROW(cross_entropy(testing::tensor<3>(logits, {n, c, l}),
                                 testing::int_tensor<2>(target, {n, l}), options),
                   InvalidArgument);
      continue;
    }
    double mean = 0;
    const std::vector<double> want = cross_entropy_reference(logits, target, n, c, l, k, mean);
    const Tensor<3> x = testing::tensor<3>(logits, {n, c, l});
    const Tensor<2, Int> t = testing::int_tensor<2>(target, {n, l});
    testing::expect_near(testing::read(cross_entropy_unreduced(x, t, options)), want, 1e-12, what);
    EXPECT_NEAR(scalar(cross_entropy(x, t, options)), mean, 1e-12) << what;
    double sum = 0;
    for (double v : want) sum += v;
    EXPECT_NEAR(scalar(cross_entropy(x, t, options, Reduction::Sum)), sum, 1e-12) << what;
  }
  // [N, C] with a valid target everywhere.
  const std::vector<double> flat = testing::values(6 * 4, 4, -2, 2);
  const std::vector<std::int64_t> labels = {3, 0, 1, 1, 2, 0};
  double mean = 0;
  cross_entropy_reference(flat, labels, 6, 4, 1, {{}, -100, 0.1}, mean);
  EXPECT_NEAR(scalar(cross_entropy(testing::tensor<2>(flat, {6, 4}),
                                   testing::int_tensor<1>(labels, {6}), {.label_smoothing = 0.1})),
              mean, 1e-12);
}

TEST(NnLoss, CrossEntropyIsStableForLargeLogits) {
  const Tensor<2> logits = testing::tensor<2>({1000, 0, -1000, 0, 1000, 0}, {2, 3}, kCpu, true);
  const std::vector<double> loss =
      testing::read(cross_entropy_unreduced(logits, testing::int_tensor<1>({0, 0}, {2})));
  EXPECT_NEAR(loss[0], 0.0, 1e-6);
  EXPECT_NEAR(loss[1], 1000.0, 1e-3);
}

TEST(NnLoss, NllLossFromLogProbabilities) {
  const Tensor<2> log_p = testing::tensor<2>({-0.5, -1.2, -2.0, -0.1, -3.0, -4.0}, {2, 3});
  const Tensor<1, Int> target = testing::int_tensor<1>({2, 0}, {2});
  EXPECT_NEAR(scalar(nll_loss(log_p, target)), (2.0 + 0.1) / 2, 1e-12);
  EXPECT_NEAR(scalar(nll_loss(log_p, target, {}, Reduction::Sum)), 2.1, 1e-12);
  EXPECT_NEAR(scalar(nll_loss(log_p, target, {.weight = testing::tensor<1>({1, 2, 3}, {3})})),
              (3 * 2.0 + 1 * 0.1) / 4, 1e-12);
  testing::expect_near(testing::read(nll_loss_unreduced(log_p, testing::int_tensor<1>({1, 7}, {2}),
                                                        {.ignore_index = 7})),
                       {1.2, 0.0}, 1e-12);
  EXPECT_THROW(nll_loss(log_p, testing::int_tensor<1>({3, 0}, {2})), InvalidArgument);
  EXPECT_THROW(nll_loss(log_p, testing::int_tensor<1>({1, 0, 2}, {3})), ShapeMismatch);
  EXPECT_THROW(nll_loss(log_p, target, {.weight = testing::tensor<1>({1, 2}, {2})}), ShapeMismatch);
  EXPECT_THROW(cross_entropy(log_p, target, {.label_smoothing = 1.5}), InvalidArgument);
}

TEST(NnLoss, BinaryCrossEntropyWithLogitsMatchesLoopsAndStaysFinite) {
  const std::int64_t n = 4, c = 3;
  const std::vector<double> x = testing::values(n * c, 5, -6, 6),
                            y = testing::values(n * c, 6, 0, 1);
  const std::vector<double> pos = {0.5, 2.0, 3.0}, w = {1.0, 0.2, 4.0};
  for (int variant = 0; variant < 3; ++variant) {
    BinaryCrossEntropyOptions options;
    if (variant >= 1) options.pos_weight = testing::tensor<1>(pos, {c});
    if (variant == 2) options.weight = testing::tensor<1>(w, {c});
    std::vector<double> want;
    double total = 0;
    for (std::int64_t i = 0; i < n * c; ++i) {
      const double s = 1 / (1 + std::exp(-x[i]));
      const double pw = variant >= 1 ? pos[i % c] : 1.0;
      const double loss = -(pw * y[i] * std::log(s) + (1 - y[i]) * std::log(1 - s)) *
                          (variant == 2 ? w[i % c] : 1.0);
      want.push_back(loss);
      total += loss;
    }
    const Tensor<2> logits = testing::tensor<2>(x, {n, c}), targets = testing::tensor<2>(y, {n, c});
    testing::expect_near(
        testing::read(binary_cross_entropy_with_logits_unreduced(logits, targets, options)), want,
        1e-10, "variant " + std::to_string(variant));
    EXPECT_NEAR(scalar(binary_cross_entropy_with_logits(logits, targets, options)), total / (n * c),
                1e-10);
    EXPECT_NEAR(scalar(binary_cross_entropy_with_logits(logits, targets, options, Reduction::Sum)),
                total, 1e-10);
  }
  // |x| = 200 in float32: exp(200) overflows, the loss does not.
  const std::vector<double> extreme = testing::read(binary_cross_entropy_with_logits_unreduced(
      testing::tensor<1>({200, -200, 200, -200}, {4}, kCpu, true),
      testing::tensor<1>({1, 1, 0, 0}, {4}, kCpu, true)));
  testing::expect_near(extreme, {0.0, 200.0, 200.0, 0.0}, 1e-5);
  EXPECT_THROW(
      binary_cross_entropy_with_logits(testing::tensor<2>(x, {n, c}), testing::tensor<2>(y, {n, c}),
                                       {.pos_weight = testing::tensor<1>({1, 2}, {2})}),
      ShapeMismatch);
}

TEST(NnLoss, RegressionAndBinaryLossGradientsMatchDifferences) {
  const std::vector<double> a = testing::values(12, 7, -2, 2), b = testing::values(12, 8, -2, 2);
  const std::vector<double> probabilities = testing::values(12, 9, 0, 1);
  const std::vector<Shape> shapes = {{3, 4}, {3, 4}};
  using Leaves = std::vector<Tensor<2>>;
  testing::expect_gradient_matches_differences<2>(
      [](const Leaves& v) { return mse_loss(v[0], v[1]); }, {a, b}, shapes);
  testing::expect_gradient_matches_differences<2>(
      [](const Leaves& v) { return l1_loss(v[0], v[1], Reduction::Sum); }, {a, b}, shapes);
  testing::expect_gradient_matches_differences<2>(
      [](const Leaves& v) { return huber_loss(v[0], v[1], 0.8); }, {a, b}, shapes);
  testing::expect_gradient_matches_differences<2>(
      [](const Leaves& v) {
        return binary_cross_entropy_with_logits(
            v[0], v[1], {.pos_weight = testing::tensor<1>({0.5, 1.5, 2.0, 3.0}, {4})});
      },
      {a, probabilities}, shapes);
}

// Needs the log_softmax rule (ad-nn) and gather's (ad-data).
TEST(NnLoss, CrossEntropyGradientIsSoftmaxMinusTheTarget) {
  const std::int64_t n = 3, c = 4;
  const std::vector<double> x = testing::values(n * c, 10, -2, 2);
  const std::vector<std::int64_t> labels = {2, 0, 3};
  const Tensor<2> logits = testing::tensor<2>(x, {n, c}, kCpu.autodiff()).require_grad();
  const Gradients g = cross_entropy(logits, testing::int_tensor<1>(labels, {n})).backward();
  // d mean CE / d logits = (softmax - one_hot) / n.
  std::vector<double> want;
  for (std::int64_t i = 0; i < n; ++i) {
    double total = 0;
    for (std::int64_t j = 0; j < c; ++j) total += std::exp(x[i * c + j]);
    for (std::int64_t j = 0; j < c; ++j) {
      want.push_back((std::exp(x[i * c + j]) / total - (j == labels[i] ? 1.0 : 0.0)) / n);
    }
  }
  testing::expect_near(testing::read(*logits.grad(g)), want, 1e-10);
  // With weights, smoothing and an ignored target, against central differences.
  testing::expect_gradient_matches_differences<2>(
      [&](const std::vector<Tensor<2>>& v) {
        return cross_entropy(
            v[0], testing::int_tensor<1>({2, -100, 1}, {n}),
            {.weight = testing::tensor<1>({1, 2, 0.5, 3}, {c}), .label_smoothing = 0.2});
      },
      {x}, {{n, c}});
}

}  // namespace
}  // namespace kiln::nn
