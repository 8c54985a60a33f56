// MultiHeadAttention and the Transformer encoder against float64 loops of their maths (packed
// projections, per-head softmax with padding, pair and causal masks, residuals, layer norms),
// with PyTorch's parameter names.
#include <kiln/nn/attention.h>
#include <kiln/nn/transformer.h>

#include <limits>

#include "nn/layer_test_util.h"

namespace kiln::nn {
namespace {

using testing::kCpu;
using Names = std::vector<std::string>;
using Shapes = std::vector<std::vector<std::int64_t>>;

// x [rows, in] W^T + b, W [out, in].
std::vector<double> linear_reference(const std::vector<double>& x, std::int64_t rows,
                                     std::int64_t in, const std::vector<double>& w,
                                     const std::vector<double>& b, std::int64_t out,
                                     std::int64_t w_row_offset = 0) {
  std::vector<double> y(static_cast<std::size_t>(rows * out));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[w_row_offset + o];
      for (std::int64_t i = 0; i < in; ++i) acc += x[r * in + i] * w[(w_row_offset + o) * in + i];
      y[r * out + o] = acc;
    }
  return y;
}

struct MhaMasks {
  std::vector<bool> key_padding;  // [B, Sk] or empty
  std::vector<bool> pairs;        // [Sq, Sk] or empty
  bool causal = false;
};

// The attention of a module whose parameters are read by name under prefix.
template <class M>
std::vector<double> mha_reference(const M& module, const std::string& prefix,
                                  const std::vector<double>& q, const std::vector<double>& k,
                                  const std::vector<double>& v, std::int64_t batch, std::int64_t sq,
                                  std::int64_t sk, std::int64_t e, std::int64_t heads,
                                  const MhaMasks& masks) {
  const std::vector<double> w = testing::param(module, prefix + "in_proj_weight");
  const std::vector<double> b = testing::param(module, prefix + "in_proj_bias");
  const std::vector<double> qp = linear_reference(q, batch * sq, e, w, b, e, 0);
  const std::vector<double> kp = linear_reference(k, batch * sk, e, w, b, e, e);
  const std::vector<double> vp = linear_reference(v, batch * sk, e, w, b, e, 2 * e);
  const std::int64_t dh = e / heads;
  std::vector<double> merged(static_cast<std::size_t>(batch * sq * e), 0.0);
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < sq; ++i) {
        std::vector<double> scores(sk);
        double top = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < sk; ++j) {
          const bool excluded = (!masks.key_padding.empty() && masks.key_padding[n * sk + j]) ||
                                (!masks.pairs.empty() && masks.pairs[i * sk + j]) ||
                                (masks.causal && j > i);
          double s = -std::numeric_limits<double>::infinity();
          if (!excluded) {
            s = 0;
            for (std::int64_t d = 0; d < dh; ++d) {
              s += qp[(n * sq + i) * e + h * dh + d] * kp[(n * sk + j) * e + h * dh + d];
            }
            s /= std::sqrt(static_cast<double>(dh));
          }
          scores[j] = s;
          top = std::max(top, s);
        }
        double total = 0;
        for (double& s : scores) total += (s = std::exp(s - top));
        for (std::int64_t j = 0; j < sk; ++j)
          for (std::int64_t d = 0; d < dh; ++d) {
            merged[(n * sq + i) * e + h * dh + d] +=
                scores[j] / total * vp[(n * sk + j) * e + h * dh + d];
          }
      }
  return linear_reference(merged, batch * sq, e, testing::param(module, prefix + "out_proj.weight"),
                          testing::param(module, prefix + "out_proj.bias"), e);
}

// Every parameter replaced by values of its own (biases start at zero otherwise).
template <class M>
M randomise(M module, std::uint64_t seed) {
  for (const NamedParam& p : named_parameters(module)) {
    module = testing::with_param(
        module, p.name, testing::values(p.value->shape().num_elements(), seed++, -0.5, 0.5));
  }
  return module;
}

MultiHeadAttention attention(std::int64_t e, std::int64_t heads, double dropout = 0.0) {
  return randomise(
      testing::to_f64(
          MultiHeadAttentionConfig{.embed_dim = e, .num_heads = heads, .dropout = dropout}.init(
              kCpu)),
      100);
}

TEST(NnAttention, NamesShapesAndInitialisationFollowPyTorch) {
  kCpu.seed(4);
  const MultiHeadAttention mha =
      MultiHeadAttentionConfig{.embed_dim = 16, .num_heads = 4}.init(kCpu);
  EXPECT_EQ(testing::names(mha),
            (Names{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(testing::shapes(mha), (Shapes{{48, 16}, {48}, {16, 16}, {16}}));
  EXPECT_EQ(testing::param(mha, "in_proj_bias"), std::vector<double>(48, 0.0));
  EXPECT_EQ(testing::param(mha, "out_proj.bias"), std::vector<double>(16, 0.0));
  auto max_abs = [](const std::vector<double>& v) {
    double m = 0;
    for (double x : v) m = std::max(m, std::abs(x));
    return m;
  };
  // Xavier-uniform over [3E, E]: bound sqrt(6 / (E + 3E)); out_proj as a Linear: 1 / sqrt(E).
  const double xavier = std::sqrt(6.0 / 64.0);
  EXPECT_LE(max_abs(testing::param(mha, "in_proj_weight")), xavier);
  EXPECT_GT(max_abs(testing::param(mha, "in_proj_weight")), 0.95 * xavier);
  EXPECT_LE(max_abs(testing::param(mha, "out_proj.weight")), 0.25);
  EXPECT_GT(max_abs(testing::param(mha, "out_proj.weight")), 0.2);
  EXPECT_EQ(testing::names(
                MultiHeadAttentionConfig{.embed_dim = 4, .num_heads = 2, .bias = false}.init(kCpu)),
            (Names{"in_proj_weight", "out_proj.weight"}));
}

TEST(NnAttention, SelfAttentionMatchesItsDefinition) {
  const std::int64_t b = 2, s = 5, e = 8, h = 2;
  const MultiHeadAttention mha = attention(e, h);
  const std::vector<double> x = testing::values(b * s * e, 1);
  const Tensor<3> y = mha.forward(testing::tensor<3>(x, {b, s, e}));
  EXPECT_EQ(y.shape(), (Shape{b, s, e}));
  testing::expect_near(testing::read(y), mha_reference(mha, "", x, x, x, b, s, s, e, h, {}), 1e-10);
}

TEST(NnAttention, CrossAttentionWithAKeyPaddingMask) {
  const std::int64_t b = 2, sq = 3, sk = 4, e = 6, h = 3;
  const MultiHeadAttention mha = attention(e, h);
  const std::vector<double> q = testing::values(b * sq * e, 2), k = testing::values(b * sk * e, 3),
                            v = testing::values(b * sk * e, 4);
  const std::vector<bool> padding = {false, false, true, true, false, false, false, true};
  const Tensor<2, Bool> mask = Tensor<2, Bool>::from_data(
      TensorData::from_vec(std::vector<bool>(padding.begin(), padding.end()), {b, sk}), kCpu);
  const Tensor<3> y =
      mha.forward(testing::tensor<3>(q, {b, sq, e}), testing::tensor<3>(k, {b, sk, e}),
                  testing::tensor<3>(v, {b, sk, e}), {.key_padding_mask = mask});
  testing::expect_near(testing::read(y),
                       mha_reference(mha, "", q, k, v, b, sq, sk, e, h, {padding, {}, false}),
                       1e-10);
}

TEST(NnAttention, CausalAndPairMasksCombine) {
  const std::int64_t b = 2, s = 4, e = 4, h = 2;
  const MultiHeadAttention mha = attention(e, h);
  const std::vector<double> x = testing::values(b * s * e, 5);
  const std::vector<bool> padding = {false, true, false, false, false, false, false, true};
  // Every query keeps a key: e.g. batch 0, query 2 sees key 2 only (0 by the pair mask, 1 by
  // padding, 3 by causality excluded).
  const std::vector<bool> pairs = {false, false, false, false,  //
                                   false, false, false, false,  //
                                   true,  false, false, false,  //
                                   false, true,  false, false};
  auto bool_tensor = [](const std::vector<bool>& v, Shape shape) {
    return Tensor<2, Bool>::from_data(TensorData::from_vec(v, std::move(shape)), kCpu);
  };
  const AttentionMasks masks{
      .key_padding_mask = bool_tensor(padding, {b, s}),
      .attn_mask = module::AttentionMask<2>::exclude(bool_tensor(pairs, {s, s})),
      .is_causal = true};
  const std::vector<double> want =
      mha_reference(mha, "", x, x, x, b, s, s, e, h, {padding, pairs, true});
  testing::expect_near(testing::read(mha.forward(testing::tensor<3>(x, {b, s, e}), masks)), want,
                       1e-10);
  // The attention op with dropout applies the same masks: with p = 1e-12 the
  // weights are kept (and scaled by 1 / (1 - 1e-12)).
  const MultiHeadAttention with_dropout = attention(e, h, 1e-12);
  testing::expect_near(
      testing::read(with_dropout.forward(testing::tensor<3>(x, {b, s, e}, kCpu.autodiff()), masks)),
      want, 1e-10, "explicit path");
  // Only the causal mask: through the attention op's is_causal.
  testing::expect_near(
      testing::read(mha.forward(testing::tensor<3>(x, {b, s, e}), {.is_causal = true})),
      mha_reference(mha, "", x, x, x, b, s, s, e, h, {{}, {}, true}), 1e-10, "causal");
}

TEST(NnAttention, QueriesWithEveryKeyExcludedGetZeroWeightsOnBothPaths) {
  const std::int64_t b = 2, s = 3, e = 4, h = 2;
  const std::vector<double> x = testing::values(b * s * e, 9);
  // Batch 1 is all padding.
  const Tensor<2, Bool> padding = Tensor<2, Bool>::from_data(
      TensorData::from_vec(std::vector<bool>{false, true, false, true, true, true}, {b, s}), kCpu);
  for (double p : {0.0, 1e-12}) {
    const MultiHeadAttention mha = attention(e, h, p);
    const Device device = p > 0 ? kCpu.autodiff() : kCpu;
    const std::vector<double> y =
        testing::read(mha.forward(testing::tensor<3>(x, {b, s, e}, device),
                                  {.key_padding_mask = padding, .is_causal = true}));
    // Batch 0 as the reference computes it; batch 1: zero weights, so out_proj's bias.
    const std::vector<double> first =
        mha_reference(mha, "", std::vector<double>(x.begin(), x.begin() + s * e),
                      std::vector<double>(x.begin(), x.begin() + s * e),
                      std::vector<double>(x.begin(), x.begin() + s * e), 1, s, s, e, h,
                      {{false, true, false}, {}, true});
    std::vector<double> want = first;
    const std::vector<double> bias = testing::param(mha, "out_proj.bias");
    for (std::int64_t i = 0; i < s; ++i) want.insert(want.end(), bias.begin(), bias.end());
    testing::expect_near(y, want, 1e-10, p > 0 ? "explicit path" : "attention op");
  }
}

TEST(NnAttention, DropoutActsOnTheWeightsInTrainingOnly) {
  const std::int64_t b = 1, s = 3, e = 4, h = 2;
  const MultiHeadAttention mha = attention(e, h, 1.0);
  const std::vector<double> x = testing::values(b * s * e, 6);
  // Evaluation: no dropout.
  testing::expect_near(testing::read(mha.forward(testing::tensor<3>(x, {b, s, e}))),
                       mha_reference(mha, "", x, x, x, b, s, s, e, h, {}), 1e-10);
  // Training with p = 1: every weight dropped, the output is out_proj's bias.
  const std::vector<double> bias = testing::param(mha, "out_proj.bias");
  std::vector<double> want;
  for (std::int64_t i = 0; i < b * s; ++i) want.insert(want.end(), bias.begin(), bias.end());
  testing::expect_near(
      testing::read(mha.forward(testing::tensor<3>(x, {b, s, e}, kCpu.autodiff()))), want, 1e-12);
}

TEST(NnAttention, BadShapesThrow) {
  EXPECT_THROW(MultiHeadAttentionConfig({.embed_dim = 6, .num_heads = 4}).init(kCpu),
               InvalidArgument);
  const MultiHeadAttention mha =
      MultiHeadAttentionConfig{.embed_dim = 4, .num_heads = 2}.init(kCpu);
  const Tensor<3> x = Tensor<3>::zeros({2, 3, 4}, kCpu);
  EXPECT_THROW(mha.forward(Tensor<3>::zeros({2, 3, 5}, kCpu)), ShapeMismatch);
  EXPECT_THROW(mha.forward(x, {.key_padding_mask = Tensor<2, Bool>::zeros({2, 4}, kCpu)}),
               ShapeMismatch);
  EXPECT_THROW(mha.forward(x, {.attn_mask = module::AttentionMask<2>::exclude(
                                   Tensor<2, Bool>::zeros({3, 2}, kCpu))}),
               ShapeMismatch);
  EXPECT_THROW(mha.forward(x, Tensor<3>::zeros({1, 3, 4}, kCpu), Tensor<3>::zeros({1, 3, 4}, kCpu)),
               ShapeMismatch);
}

// ---- Transformer encoder ----

std::vector<double> layer_norm_rows(const std::vector<double>& x, std::int64_t size,
                                    const std::vector<double>& w, const std::vector<double>& b) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / size; ++r) {
    double mean = 0, var = 0;
    for (std::int64_t i = 0; i < size; ++i) mean += x[r * size + i] / size;
    for (std::int64_t i = 0; i < size; ++i) var += std::pow(x[r * size + i] - mean, 2) / size;
    for (std::int64_t i = 0; i < size; ++i) {
      y[r * size + i] = (x[r * size + i] - mean) / std::sqrt(var + 1e-5) * w[i] + b[i];
    }
  }
  return y;
}

std::vector<double> add(std::vector<double> a, const std::vector<double>& b) {
  for (std::size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

template <class M>
std::vector<double> encoder_layer_reference(const M& module, const std::string& prefix,
                                            const std::vector<double>& x, std::int64_t batch,
                                            std::int64_t s, std::int64_t e, std::int64_t heads,
                                            std::int64_t ff, bool norm_first, bool gelu,
                                            const MhaMasks& masks) {
  auto p = [&](const std::string& name) { return testing::param(module, prefix + name); };
  auto norm = [&](const std::vector<double>& v, const std::string& which) {
    return layer_norm_rows(v, e, p(which + ".weight"), p(which + ".bias"));
  };
  auto self_attention = [&](const std::vector<double>& v) {
    return mha_reference(module, prefix + "self_attn.", v, v, v, batch, s, s, e, heads, masks);
  };
  auto feed_forward = [&](const std::vector<double>& v) {
    std::vector<double> hidden =
        linear_reference(v, batch * s, e, p("linear1.weight"), p("linear1.bias"), ff);
    for (double& z : hidden)
      z = gelu ? 0.5 * z * (1 + std::erf(z / std::sqrt(2.0))) : std::max(z, 0.0);
    return linear_reference(hidden, batch * s, ff, p("linear2.weight"), p("linear2.bias"), e);
  };
  if (norm_first) {
    const std::vector<double> h = add(x, self_attention(norm(x, "norm1")));
    return add(h, feed_forward(norm(h, "norm2")));
  }
  const std::vector<double> h = norm(add(x, self_attention(x)), "norm1");
  return norm(add(h, feed_forward(h)), "norm2");
}

TEST(NnTransformer, EncoderLayerNamesAndShapesFollowPyTorch) {
  const TransformerEncoderLayer layer =
      TransformerEncoderLayerConfig{.d_model = 8, .nhead = 2, .dim_feedforward = 16}.init(kCpu);
  // torch.nn.TransformerEncoderLayer(8, 2, 16).state_dict(), in order.
  EXPECT_EQ(
      testing::names(layer),
      (Names{"self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
             "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
             "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"}));
  EXPECT_EQ(testing::shapes(layer),
            (Shapes{{24, 8}, {24}, {8, 8}, {8}, {16, 8}, {16}, {8, 16}, {8}, {8}, {8}, {8}, {8}}));
  const TransformerEncoder encoder =
      TransformerEncoderConfig{.layer = {.d_model = 8, .nhead = 2, .dim_feedforward = 16},
                               .num_layers = 2,
                               .final_norm = true}
          .init(kCpu);
  const Names names = testing::names(encoder);
  ASSERT_EQ(names.size(), 26u);
  EXPECT_EQ(names[0], "layers.0.self_attn.in_proj_weight");
  EXPECT_EQ(names[12], "layers.1.self_attn.in_proj_weight");
  EXPECT_EQ(names[24], "norm.weight");
  EXPECT_EQ(names[25], "norm.bias");
}

TEST(NnTransformer, EncoderLayerMatchesItsDefinitionPostAndPreNorm) {
  const std::int64_t b = 2, s = 4, e = 8, heads = 2, ff = 12;
  const std::vector<double> x = testing::values(b * s * e, 7);
  for (bool norm_first : {false, true}) {
    for (bool gelu : {false, true}) {
      const TransformerEncoderLayer layer = randomise(
          testing::to_f64(TransformerEncoderLayerConfig{
              .d_model = e,
              .nhead = heads,
              .dim_feedforward = ff,
              .dropout = 0.1,
              .activation = gelu ? FeedForwardActivation::Gelu : FeedForwardActivation::Relu,
              .norm_first = norm_first}
                              .init(kCpu)),
          200);
      // Evaluation (a plain device): the dropouts are off.
      const Tensor<3> y = layer.forward(testing::tensor<3>(x, {b, s, e}), {.is_causal = true});
      testing::expect_near(testing::read(y),
                           encoder_layer_reference(layer, "", x, b, s, e, heads, ff, norm_first,
                                                   gelu, {{}, {}, true}),
                           1e-10,
                           std::string(norm_first ? "pre" : "post") + (gelu ? " gelu" : " relu"));
    }
  }
}

TEST(NnTransformer, EncoderStacksLayersAndAFinalNorm) {
  const std::int64_t b = 1, s = 3, e = 4, heads = 2, ff = 8;
  const TransformerEncoder encoder = randomise(
      testing::to_f64(TransformerEncoderConfig{
          .layer = {.d_model = e, .nhead = heads, .dim_feedforward = ff, .norm_first = true},
          .num_layers = 2,
          .final_norm = true}
                          .init(kCpu)),
      300);
  const std::vector<double> x = testing::values(b * s * e, 8);
  std::vector<double> want = x;
  for (int i = 0; i < 2; ++i) {
    want = encoder_layer_reference(encoder, "layers." + std::to_string(i) + ".", want, b, s, e,
                                   heads, ff, true, false, {});
  }
  want = layer_norm_rows(want, e, testing::param(encoder, "norm.weight"),
                         testing::param(encoder, "norm.bias"));
  testing::expect_near(testing::read(encoder.forward(testing::tensor<3>(x, {b, s, e}))), want,
                       1e-10);
}

}  // namespace
}  // namespace kiln::nn
