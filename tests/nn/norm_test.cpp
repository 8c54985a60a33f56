// BatchNorm (training statistics, running-statistic updates, evaluation), LayerNorm, RmsNorm and
// GroupNorm against float64 loops of their definitions; PyTorch's names and initial values.
#include <kiln/nn/norm.h>

#include <limits>

#include "nn/layer_test_util.h"

namespace kiln::nn {
namespace {

using testing::kCpu;

// x [n, c, s] (s: the spatial positions flattened): per-channel mean and biased variance.
void channel_statistics(const std::vector<double>& x, std::int64_t n, std::int64_t c,
                        std::int64_t s, std::vector<double>& mean, std::vector<double>& var) {
  mean.assign(c, 0.0);
  var.assign(c, 0.0);
  const double count = static_cast<double>(n * s);
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t k = 0; k < c; ++k)
      for (std::int64_t i = 0; i < s; ++i) mean[k] += x[(b * c + k) * s + i] / count;
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t k = 0; k < c; ++k)
      for (std::int64_t i = 0; i < s; ++i) {
        const double d = x[(b * c + k) * s + i] - mean[k];
        var[k] += d * d / count;
      }
}

std::vector<double> normalise_channels(const std::vector<double>& x, std::int64_t n, std::int64_t c,
                                       std::int64_t s, const std::vector<double>& mean,
                                       const std::vector<double>& var, const std::vector<double>& w,
                                       const std::vector<double>& b, double eps) {
  std::vector<double> y(x.size());
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t k = 0; k < c; ++k)
      for (std::int64_t j = 0; j < s; ++j) {
        const std::size_t at = static_cast<std::size_t>((i * c + k) * s + j);
        y[at] = (x[at] - mean[k]) / std::sqrt(var[k] + eps) * (w.empty() ? 1.0 : w[k]) +
                (b.empty() ? 0.0 : b[k]);
      }
  return y;
}

BatchNorm affine_batch_norm(std::int64_t channels, double momentum) {
  BatchNorm bn =
      testing::to_f64(BatchNormConfig{.num_features = channels, .momentum = momentum}.init(kCpu));
  bn = testing::with_param(bn, "weight", testing::values(channels, 21, 0.5, 1.5));
  return testing::with_param(bn, "bias", testing::values(channels, 22));
}

TEST(NnNorm, BatchNormNamesShapesAndInitialValues) {
  const BatchNorm bn = BatchNormConfig{.num_features = 5}.init(kCpu);
  EXPECT_EQ(testing::names(bn),
            (std::vector<std::string>{"weight", "bias", "running_mean", "running_var"}));
  EXPECT_EQ(testing::shapes(bn), (std::vector<std::vector<std::int64_t>>{{5}, {5}, {5}, {5}}));
  std::vector<bool> trainable;
  for (const NamedParam& p : named_parameters(bn)) trainable.push_back(p.trainable);
  EXPECT_EQ(trainable, (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(testing::param(bn, "weight"), std::vector<double>(5, 1.0));
  EXPECT_EQ(testing::param(bn, "bias"), std::vector<double>(5, 0.0));
  EXPECT_EQ(testing::param(bn, "running_mean"), std::vector<double>(5, 0.0));
  EXPECT_EQ(testing::param(bn, "running_var"), std::vector<double>(5, 1.0));
  EXPECT_EQ(num_params(bn), 10);
  // PyTorch's fifth state_dict entry, a count rather than a tensor parameter.
  ASSERT_TRUE(bn.num_batches_tracked.has_value());
  EXPECT_EQ(bn.num_batches_tracked->value(), 0);
  EXPECT_NE(describe(bn).find("num_batches_tracked: 0 (counter)"), std::string::npos)
      << describe(bn);
  const BatchNormConfig untracked{.num_features = 5, .track_running_stats = false};
  EXPECT_FALSE(untracked.init(kCpu).num_batches_tracked.has_value());
  EXPECT_TRUE(
      testing::names(
          BatchNormConfig{.num_features = 5, .affine = false, .track_running_stats = false}.init(
              kCpu))
          .empty());
}

TEST(NnNorm, BatchNorm2dTrainsOnBatchStatisticsAndUpdatesRunningOnes) {
  const std::int64_t n = 3, c = 4, h = 2, w = 5, s = h * w;
  const double momentum = 0.3, eps = 1e-5;
  const BatchNorm bn = affine_batch_norm(c, momentum);
  const std::vector<double> gamma = testing::param(bn, "weight"), beta = testing::param(bn, "bias");
  std::vector<double> running_mean(c, 0.0), running_var(c, 1.0);
  for (std::uint64_t step = 0; step < 2; ++step) {
    const std::vector<double> x = testing::values(n * c * s, 30 + step, -2.0, 3.0);
    std::vector<double> mean, var;
    channel_statistics(x, n, c, s, mean, var);
    const std::vector<double> want = normalise_channels(x, n, c, s, mean, var, gamma, beta, eps);
    // Training mode: the input on the autodiff device.
    const Tensor<4> y = bn.forward(testing::tensor<4>(x, {n, c, h, w}, kCpu.autodiff()));
    testing::expect_near(testing::read(y), want, 1e-10, "training output");
    const double unbiased = static_cast<double>(n * s) / static_cast<double>(n * s - 1);
    for (std::int64_t k = 0; k < c; ++k) {
      running_mean[k] = (1 - momentum) * running_mean[k] + momentum * mean[k];
      running_var[k] = (1 - momentum) * running_var[k] + momentum * var[k] * unbiased;
    }
    testing::expect_near(testing::param(bn, "running_mean"), running_mean, 1e-12, "running_mean");
    testing::expect_near(testing::param(bn, "running_var"), running_var, 1e-12, "running_var");
  }
  // Evaluation: the running statistics, which stay as they are.
  const std::vector<double> x = testing::values(n * c * s, 40);
  const Tensor<4> y = bn.forward(testing::tensor<4>(x, {n, c, h, w}));
  testing::expect_near(testing::read(y),
                       normalise_channels(x, n, c, s, running_mean, running_var, gamma, beta, eps),
                       1e-10, "evaluation output");
  testing::expect_near(testing::param(bn, "running_mean"), running_mean, 1e-12);
}

TEST(NnNorm, BatchNormCountsTrainingBatchesOnly) {
  const BatchNorm bn = affine_batch_norm(2, 0.1);
  const Tensor<3> x = testing::tensor<3>(testing::values(4 * 2 * 3, 70), {4, 2, 3});
  for (int i = 0; i < 3; ++i) bn.forward(x.to_device(kCpu.autodiff()));
  EXPECT_EQ(bn.num_batches_tracked->value(), 3);
  bn.forward(x);  // evaluation neither counts nor moves the statistics
  EXPECT_EQ(bn.num_batches_tracked->value(), 3);
  // A copy counts on its own, as its buffers move on their own.
  const BatchNorm copy = bn;
  copy.forward(x.to_device(kCpu.autodiff()));
  EXPECT_EQ(copy.num_batches_tracked->value(), 4);
  EXPECT_EQ(bn.num_batches_tracked->value(), 3);
}

// momentum none: the running statistics are the plain mean of every batch's statistics so far
// (the variances unbiased), whatever they were before the first batch.
TEST(NnNorm, BatchNormWithoutMomentumKeepsACumulativeAverage) {
  const std::int64_t n = 3, c = 2, s = 4;
  const double eps = 1e-5;
  BatchNorm bn =
      testing::to_f64(BatchNormConfig{.num_features = c, .momentum = std::nullopt}.init(kCpu));
  bn = testing::with_param(bn, "running_mean", {5.0, -5.0});  // forgotten after the first batch
  std::vector<double> sum_mean(c, 0.0), sum_var(c, 0.0);
  const double unbiased = static_cast<double>(n * s) / static_cast<double>(n * s - 1);
  for (std::uint64_t step = 1; step <= 4; ++step) {
    // Batches of different scale, so a moving average with any fixed factor would differ.
    const std::vector<double> x = testing::values(n * c * s, 80 + step, -1.0 * step, 2.0 * step);
    std::vector<double> mean, var;
    channel_statistics(x, n, c, s, mean, var);
    bn.forward(testing::tensor<3>(x, {n, c, s}, kCpu.autodiff()));
    std::vector<double> want_mean(c), want_var(c);
    for (std::int64_t k = 0; k < c; ++k) {
      sum_mean[k] += mean[k];
      sum_var[k] += var[k] * unbiased;
      want_mean[k] = sum_mean[k] / static_cast<double>(step);
      want_var[k] = sum_var[k] / static_cast<double>(step);
    }
    EXPECT_EQ(bn.num_batches_tracked->value(), static_cast<std::int64_t>(step));
    testing::expect_near(testing::param(bn, "running_mean"), want_mean, 1e-12, "running_mean");
    testing::expect_near(testing::param(bn, "running_var"), want_var, 1e-12, "running_var");
  }
  // Evaluation uses the averages.
  const std::vector<double> x = testing::values(n * c * s, 90);
  testing::expect_near(testing::read(bn.forward(testing::tensor<3>(x, {n, c, s}))),
                       normalise_channels(x, n, c, s, testing::param(bn, "running_mean"),
                                          testing::param(bn, "running_var"), {}, {}, eps),
                       1e-10, "evaluation");
  // Without a counter there is nothing to average over.
  BatchNorm uncounted = bn;
  uncounted.num_batches_tracked.reset();
  EXPECT_THROW(uncounted.forward(testing::tensor<3>(x, {n, c, s}, kCpu.autodiff())),
               InvalidArgument);
}

TEST(NnNorm, BatchNorm1dOverFeaturesAndOverSequences) {
  const std::int64_t n = 6, c = 3, l = 4;
  const BatchNorm bn = affine_batch_norm(c, 0.1);
  const std::vector<double> gamma = testing::param(bn, "weight"), beta = testing::param(bn, "bias");
  {
    const std::vector<double> x = testing::values(n * c, 50);
    std::vector<double> mean, var;
    channel_statistics(x, n, c, 1, mean, var);
    const Tensor<2> y = bn.forward(testing::tensor<2>(x, {n, c}, kCpu.autodiff()));
    testing::expect_near(testing::read(y),
                         normalise_channels(x, n, c, 1, mean, var, gamma, beta, 1e-5), 1e-10,
                         "[N, C]");
  }
  {
    const std::vector<double> x = testing::values(n * c * l, 51);
    std::vector<double> mean, var;
    channel_statistics(x, n, c, l, mean, var);
    const Tensor<3> y = bn.forward(testing::tensor<3>(x, {n, c, l}, kCpu.autodiff()));
    testing::expect_near(testing::read(y),
                         normalise_channels(x, n, c, l, mean, var, gamma, beta, 1e-5), 1e-10,
                         "[N, C, L]");
  }
}

TEST(NnNorm, BatchNormWithoutRunningStatisticsUsesTheBatchInEvaluation) {
  const std::int64_t n = 4, c = 2, s = 3;
  const BatchNorm bn = testing::to_f64(BatchNormConfig{
      .num_features = c, .epsilon = 1e-3, .affine = false, .track_running_stats = false}
                                           .init(kCpu));
  const std::vector<double> x = testing::values(n * c * s, 60);
  std::vector<double> mean, var;
  channel_statistics(x, n, c, s, mean, var);
  const Tensor<3> y = bn.forward(testing::tensor<3>(x, {n, c, s}));
  testing::expect_near(testing::read(y), normalise_channels(x, n, c, s, mean, var, {}, {}, 1e-3),
                       1e-10);
}

TEST(NnNorm, BatchNormRejectsWrongChannelsAndSingleValueBatches) {
  const BatchNorm bn = BatchNormConfig{.num_features = 3}.init(kCpu);
  EXPECT_THROW(bn.forward(Tensor<2>::zeros({4, 2}, kCpu)), ShapeMismatch);
  EXPECT_THROW(bn.forward(Tensor<2>::zeros({1, 3}, kCpu.autodiff())), InvalidArgument);
  EXPECT_THROW(BatchNormConfig({.num_features = 3, .momentum = 1.5}).init(kCpu), InvalidArgument);
  EXPECT_THROW(BatchNormConfig({.num_features = 0}).init(kCpu), InvalidArgument);
}

// Rows of the last dim: (x - mean) / sqrt(var + eps) * w + b.
std::vector<double> layer_norm_reference(const std::vector<double>& x, std::int64_t size,
                                         const std::vector<double>& w, const std::vector<double>& b,
                                         double eps) {
  std::vector<double> y(x.size());
  for (std::size_t row = 0; row < x.size() / size; ++row) {
    double mean = 0, var = 0;
    for (std::int64_t i = 0; i < size; ++i) mean += x[row * size + i] / size;
    for (std::int64_t i = 0; i < size; ++i) var += std::pow(x[row * size + i] - mean, 2) / size;
    for (std::int64_t i = 0; i < size; ++i) {
      y[row * size + i] =
          (x[row * size + i] - mean) / std::sqrt(var + eps) * (w.empty() ? 1 : w[i]) +
          (b.empty() ? 0 : b[i]);
    }
  }
  return y;
}

TEST(NnNorm, LayerNormMatchesItsDefinition) {
  const std::int64_t size = 5;
  LayerNorm ln =
      testing::to_f64(LayerNormConfig{.normalized_size = size, .epsilon = 1e-4}.init(kCpu));
  EXPECT_EQ(testing::names(ln), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(testing::param(ln, "weight"), std::vector<double>(size, 1.0));
  EXPECT_EQ(testing::param(ln, "bias"), std::vector<double>(size, 0.0));
  ln = testing::with_param(ln, "weight", testing::values(size, 70));
  ln = testing::with_param(ln, "bias", testing::values(size, 71));
  const std::vector<double> x = testing::values(2 * 3 * size, 72, -3, 3);
  testing::expect_near(
      testing::read(ln.forward(testing::tensor<3>(x, {2, 3, size}))),
      layer_norm_reference(x, size, testing::param(ln, "weight"), testing::param(ln, "bias"), 1e-4),
      1e-10);
  const LayerNorm bare = testing::to_f64(
      LayerNormConfig{.normalized_size = size, .elementwise_affine = false}.init(kCpu));
  EXPECT_TRUE(testing::names(bare).empty());
  testing::expect_near(testing::read(bare.forward(testing::tensor<2>(x, {6, size}))),
                       layer_norm_reference(x, size, {}, {}, 1e-5), 1e-10);
  EXPECT_EQ(testing::names(LayerNormConfig{.normalized_size = size, .bias = false}.init(kCpu)),
            (std::vector<std::string>{"weight"}));
  EXPECT_THROW(ln.forward(testing::tensor<2>(x, {5, 6})), ShapeMismatch);
}

TEST(NnNorm, RmsNormMatchesItsDefinitionWithPyTorchsDefaultEpsilon) {
  const std::int64_t size = 4;
  RmsNorm rms = testing::to_f64(RmsNormConfig{.normalized_size = size}.init(kCpu));
  EXPECT_EQ(testing::names(rms), (std::vector<std::string>{"weight"}));
  rms = testing::with_param(rms, "weight", testing::values(size, 80));
  const std::vector<double> w = testing::param(rms, "weight");
  auto reference = [&](const std::vector<double>& x, double eps) {
    std::vector<double> y(x.size());
    for (std::size_t row = 0; row < x.size() / size; ++row) {
      double ms = 0;
      for (std::int64_t i = 0; i < size; ++i) ms += x[row * size + i] * x[row * size + i] / size;
      for (std::int64_t i = 0; i < size; ++i)
        y[row * size + i] = x[row * size + i] / std::sqrt(ms + eps) * w[i];
    }
    return y;
  };
  // Values of size 1e-8: mean squares near 1e-16, where float64's epsilon (2.2e-16) shows.
  std::vector<double> x = testing::values(3 * size, 81);
  for (double& v : x) v *= 1e-8;
  testing::expect_near(testing::read(rms.forward(testing::tensor<2>(x, {3, size}))),
                       reference(x, std::numeric_limits<double>::epsilon()), 1e-10);
  RmsNorm given = rms;
  given.epsilon = 1e-16;
  testing::expect_near(testing::read(given.forward(testing::tensor<2>(x, {3, size}))),
                       reference(x, 1e-16), 1e-10);
}

TEST(NnNorm, GroupNormMatchesItsDefinition) {
  const std::int64_t n = 2, c = 6, groups = 3, h = 2, w = 3, s = h * w, per = c / groups;
  GroupNorm gn =
      testing::to_f64(GroupNormConfig{.num_groups = groups, .num_channels = c}.init(kCpu));
  EXPECT_EQ(testing::names(gn), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(testing::shapes(gn), (std::vector<std::vector<std::int64_t>>{{6}, {6}}));
  gn = testing::with_param(gn, "weight", testing::values(c, 90));
  gn = testing::with_param(gn, "bias", testing::values(c, 91));
  const std::vector<double> gamma = testing::param(gn, "weight"), beta = testing::param(gn, "bias");
  const std::vector<double> x = testing::values(n * c * s, 92, -2, 2);
  std::vector<double> want(x.size());
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t g = 0; g < groups; ++g) {
      // Channels [g * per, (g + 1) * per) at every position: one contiguous block.
      const std::size_t begin = static_cast<std::size_t>((b * c + g * per) * s), count = per * s;
      double mean = 0, var = 0;
      for (std::size_t i = 0; i < count; ++i) mean += x[begin + i] / count;
      for (std::size_t i = 0; i < count; ++i) var += std::pow(x[begin + i] - mean, 2) / count;
      for (std::size_t i = 0; i < count; ++i) {
        const std::int64_t channel = g * per + static_cast<std::int64_t>(i) / s;
        want[begin + i] =
            (x[begin + i] - mean) / std::sqrt(var + 1e-5) * gamma[channel] + beta[channel];
      }
    }
  // The same in training and in evaluation.
  testing::expect_near(testing::read(gn.forward(testing::tensor<4>(x, {n, c, h, w}))), want, 1e-10);
  testing::expect_near(
      testing::read(gn.forward(testing::tensor<4>(x, {n, c, h, w}, kCpu.autodiff()))), want, 1e-10);
  EXPECT_THROW(GroupNormConfig({.num_groups = 4, .num_channels = 6}).init(kCpu), InvalidArgument);
  EXPECT_THROW(gn.forward(Tensor<3>::zeros({2, 4, 3}, kCpu, DType::F64)), ShapeMismatch);
}

}  // namespace
}  // namespace kiln::nn
