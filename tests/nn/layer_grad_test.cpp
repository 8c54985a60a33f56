// Gradients of layers (parameters and input) against central differences, in float64.
// These need the backward rules of layout, indexing, module and activation ops (branches ad-data
// and ad-nn); until those land they fail with "[op] has no backward rule".
#include <kiln/nn/nn.h>

#include "nn/layer_test_util.h"

namespace kiln::nn {
namespace {

using testing::kCpu;

TEST(NnLayerGrad, Conv2dWithStridePaddingGroups) {
  const Conv2d conv = testing::to_f64(Conv2dConfig{.in_channels = 4,
                                                   .out_channels = 4,
                                                   .kernel_size = {3, 2},
                                                   .stride = {2, 1},
                                                   .padding = {1, 1},
                                                   .groups = 2}
                                          .init(kCpu));
  testing::expect_layer_gradients<Conv2d, 4>(
      conv, [](const Conv2d& m, const Tensor<4>& x) { return testing::weighted_sum(m.forward(x)); },
      testing::values(2 * 4 * 5 * 4, 1), {2, 4, 5, 4});
}

TEST(NnLayerGrad, ConvTranspose2d) {
  const ConvTranspose2d conv = testing::to_f64(ConvTranspose2dConfig{
      .in_channels = 2,
      .out_channels = 3,
      .kernel_size = {2, 3},
      .stride = {2, 1},
      .padding = {0, 1}}.init(kCpu));
  testing::expect_layer_gradients<ConvTranspose2d, 4>(
      conv,
      [](const ConvTranspose2d& m, const Tensor<4>& x) {
        return testing::weighted_sum(m.forward(x));
      },
      testing::values(2 * 2 * 3 * 3, 2), {2, 2, 3, 3});
}

TEST(NnLayerGrad, BatchNormInTraining) {
  BatchNorm bn = testing::to_f64(BatchNormConfig{.num_features = 3}.init(kCpu));
  bn = testing::with_param(bn, "weight", testing::values(3, 3, 0.5, 1.5));
  bn = testing::with_param(bn, "bias", testing::values(3, 4));
  testing::expect_layer_gradients<BatchNorm, 4>(
      bn,
      [](const BatchNorm& m, const Tensor<4>& x) { return testing::weighted_sum(m.forward(x)); },
      testing::values(4 * 3 * 2 * 2, 5, -2, 2), {4, 3, 2, 2});
}

TEST(NnLayerGrad, LayerRmsAndGroupNorms) {
  LayerNorm ln = testing::to_f64(LayerNormConfig{.normalized_size = 5}.init(kCpu));
  ln = testing::with_param(ln, "weight", testing::values(5, 6));
  testing::expect_layer_gradients<LayerNorm, 3>(
      ln,
      [](const LayerNorm& m, const Tensor<3>& x) { return testing::weighted_sum(m.forward(x)); },
      testing::values(2 * 3 * 5, 7), {2, 3, 5});
  const RmsNorm rms =
      testing::to_f64(RmsNormConfig{.normalized_size = 4, .epsilon = 1e-6}.init(kCpu));
  testing::expect_layer_gradients<RmsNorm, 2>(
      rms, [](const RmsNorm& m, const Tensor<2>& x) { return testing::weighted_sum(m.forward(x)); },
      testing::values(3 * 4, 8), {3, 4});
  const GroupNorm gn =
      testing::to_f64(GroupNormConfig{.num_groups = 2, .num_channels = 4}.init(kCpu));
  testing::expect_layer_gradients<GroupNorm, 3>(
      gn,
      [](const GroupNorm& m, const Tensor<3>& x) { return testing::weighted_sum(m.forward(x)); },
      testing::values(2 * 4 * 3, 9), {2, 4, 3});
}

TEST(NnLayerGrad, MultiHeadAttentionWithMasks) {
  const MultiHeadAttention mha =
      testing::to_f64(MultiHeadAttentionConfig{.embed_dim = 4, .num_heads = 2}.init(kCpu));
  const Tensor<2, Bool> padding = Tensor<2, Bool>::from_data(
      TensorData::from_vec(std::vector<bool>{false, false, true, false, false, false}, {2, 3}),
      kCpu);
  testing::expect_layer_gradients<MultiHeadAttention, 3>(
      mha,
      [&](const MultiHeadAttention& m, const Tensor<3>& x) {
        return testing::weighted_sum(
            m.forward(x, {.key_padding_mask = padding, .is_causal = true}));
      },
      testing::values(2 * 3 * 4, 10), {2, 3, 4});
}

TEST(NnLayerGrad, TransformerEncoderLayer) {
  const TransformerEncoderLayer layer = testing::to_f64(TransformerEncoderLayerConfig{
      .d_model = 4, .nhead = 2, .dim_feedforward = 6, .dropout = 0.0, .norm_first = true}
                                                            .init(kCpu));
  testing::expect_layer_gradients<TransformerEncoderLayer, 3>(
      layer,
      [](const TransformerEncoderLayer& m, const Tensor<3>& x) {
        return testing::weighted_sum(m.forward(x));
      },
      testing::values(2 * 3 * 4, 11), {2, 3, 4}, 1e-5);
}

TEST(NnLayerGrad, LstmAndGru) {
  const Lstm lstm = testing::to_f64(
      LstmConfig{.input_size = 2, .hidden_size = 3, .num_layers = 2, .batch_first = true}.init(
          kCpu));
  testing::expect_layer_gradients<Lstm, 3>(lstm,
                                           [](const Lstm& m, const Tensor<3>& x) {
                                             const LstmOutput out = m.forward(x);
                                             return testing::weighted_sum(out.output) +
                                                    testing::weighted_sum(out.state.c, 7);
                                           },
                                           testing::values(2 * 4 * 2, 12), {2, 4, 2});
  const Gru gru =
      testing::to_f64(GruConfig{.input_size = 2, .hidden_size = 3, .num_layers = 2}.init(kCpu));
  testing::expect_layer_gradients<Gru, 3>(
      gru,
      [](const Gru& m, const Tensor<3>& x) { return testing::weighted_sum(m.forward(x).output); },
      testing::values(4 * 2 * 2, 13), {4, 2, 2});
}

TEST(NnLayerGrad, BidirectionalLstmAndGru) {
  const Lstm lstm = testing::to_f64(LstmConfig{.input_size = 2,
                                               .hidden_size = 2,
                                               .num_layers = 2,
                                               .batch_first = true,
                                               .bidirectional = true}
                                        .init(kCpu));
  testing::expect_layer_gradients<Lstm, 3>(lstm,
                                           [](const Lstm& m, const Tensor<3>& x) {
                                             const LstmOutput out = m.forward(x);
                                             return testing::weighted_sum(out.output) +
                                                    testing::weighted_sum(out.state.h, 5) +
                                                    testing::weighted_sum(out.state.c, 7);
                                           },
                                           testing::values(2 * 3 * 2, 15), {2, 3, 2});
  const Gru gru = testing::to_f64(
      GruConfig{.input_size = 2, .hidden_size = 3, .num_layers = 2, .bidirectional = true}.init(
          kCpu));
  testing::expect_layer_gradients<Gru, 3>(gru,
                                          [](const Gru& m, const Tensor<3>& x) {
                                            const GruOutput out = m.forward(x);
                                            return testing::weighted_sum(out.output) +
                                                   testing::weighted_sum(out.h, 3);
                                          },
                                          testing::values(3 * 2 * 2, 16), {3, 2, 2});
}

TEST(NnLayerGrad, SequentialOfLinearAndActivations) {
  const auto net =
      testing::to_f64(Sequential(LinearConfig{3, 4}.init(kCpu), Silu{},
                                 LinearConfig{4, 2}.init(kCpu), Gelu{.tanh_approximation = true}));
  using Net = std::remove_const_t<decltype(net)>;
  testing::expect_layer_gradients<Net, 2>(
      net, [](const Net& m, const Tensor<2>& x) { return testing::weighted_sum(m.forward(x)); },
      testing::values(5 * 3, 14), {5, 3});
}

}  // namespace
}  // namespace kiln::nn
