#include "kiln/nn/attention.h"

#include <cmath>
#include <limits>

#include "kiln/activation.h"
#include "kiln/detail/format.h"
#include "kiln/nn/dropout.h"

namespace kiln::nn {
namespace {

// [B, S, E] -> [B, H, S, E / H]: head h takes features [h * E / H, (h + 1) * E / H).
Tensor<4> split_heads(const Tensor<3>& x, std::int64_t heads) {
  const auto [batch, length, embed] = x.dims();
  return x.reshape<4>(Shape{batch, length, heads, embed / heads}).swap_dims(1, 2);
}

void check_input(const char* op, const char* name, const Tensor<3>& x, std::int64_t embed_dim) {
  if (x.dims()[2] != embed_dim) {
    kiln::detail::fail<ShapeMismatch>(op, name, " ", x.shape().to_string(), " has ", x.dims()[2],
                                      " features but embed_dim is ", embed_dim);
  }
}

// The masks combined into one [B or 1, 1, Sq or 1, Sk] mask (true = excluded), causality aside.
std::optional<Tensor<4, Bool>> combine_masks(const char* op, const AttentionMasks& masks,
                                             std::int64_t batch, std::int64_t queries,
                                             std::int64_t keys) {
  std::optional<Tensor<4, Bool>> out;
  if (masks.key_padding_mask) {
    const Tensor<2, Bool>& m = *masks.key_padding_mask;
    if (m.dims()[0] != batch || m.dims()[1] != keys) {
      kiln::detail::fail<ShapeMismatch>(op, "key_padding_mask ", m.shape().to_string(),
                                        " must be [batch, key_len] = [", batch, ", ", keys, "]");
    }
    out = m.reshape<4>(Shape{batch, 1, 1, keys});
  }
  if (masks.attn_mask) {
    const Tensor<2, Bool>& m = *masks.attn_mask;
    if (m.dims()[0] != queries || m.dims()[1] != keys) {
      kiln::detail::fail<ShapeMismatch>(op, "attn_mask ", m.shape().to_string(),
                                        " must be [query_len, key_len] = [", queries, ", ", keys,
                                        "]");
    }
    Tensor<4, Bool> pairs = m.reshape<4>(Shape{1, 1, queries, keys});
    if (out) {
      const Shape both{batch, 1, queries, keys};
      pairs = out->expand<4>(both).logical_or(pairs.expand<4>(both));
    }
    out = pairs;
  }
  return out;
}

// [1, 1, Sq, Sk], true where key j is after query i.
Tensor<4, Bool> causal_mask(std::int64_t queries, std::int64_t keys, const Device& device) {
  const Shape pairs{1, 1, queries, keys};
  const auto rows = Tensor<1, Int>::arange(0, queries, device)
                        .reshape<4>(Shape{1, 1, queries, 1})
                        .expand<4>(pairs);
  const auto columns =
      Tensor<1, Int>::arange(0, keys, device).reshape<4>(Shape{1, 1, 1, keys}).expand<4>(pairs);
  return columns.greater(rows);
}

}  // namespace

MultiHeadAttention MultiHeadAttentionConfig::init(const Device& device) const {
  const char* op = "MultiHeadAttentionConfig::init";
  if (embed_dim <= 0 || num_heads <= 0 || embed_dim % num_heads != 0) {
    kiln::detail::fail<InvalidArgument>(op, "embed_dim ", embed_dim,
                                        " must be a positive multiple of num_heads ", num_heads);
  }
  detail::check_dropout_probability(dropout);
  MultiHeadAttention layer;
  layer.in_proj_weight =
      Param<2>(Initializer::xavier_uniform().init<2>(Shape{3 * embed_dim, embed_dim}, device));
  if (bias) layer.in_proj_bias = Param<1>(Tensor<1>::zeros({3 * embed_dim}, device));
  layer.out_proj = LinearConfig{embed_dim, embed_dim, bias}.init(device);
  if (bias) layer.out_proj.bias = Param<1>(Tensor<1>::zeros({embed_dim}, device));
  layer.num_heads = num_heads;
  layer.dropout = dropout;
  return layer;
}

Tensor<3> MultiHeadAttention::forward(const Tensor<3>& query, const Tensor<3>& key,
                                      const Tensor<3>& value, const AttentionMasks& masks) const {
  const char* op = "MultiHeadAttention::forward";
  const std::int64_t embed = embed_dim();
  check_input(op, "query", query, embed);
  check_input(op, "key", key, embed);
  check_input(op, "value", value, embed);
  const std::int64_t batch = query.dims()[0], queries = query.dims()[1], keys = key.dims()[1];
  if (key.dims()[0] != batch || value.dims()[0] != batch || value.dims()[1] != keys) {
    kiln::detail::fail<ShapeMismatch>(
        op, "query ", query.shape().to_string(), ", key ", key.shape().to_string(), " and value ",
        value.shape().to_string(), " must share the batch, and key and value the length");
  }
  const Tensor<2> packed = in_proj_weight.val();
  auto project = [&](const Tensor<3>& x, std::int64_t part) {
    std::optional<Tensor<1>> b;
    if (in_proj_bias) b = in_proj_bias->val().narrow(0, part * embed, embed);
    const Tensor<2> w = packed.narrow(0, part * embed, embed);
    return split_heads(module::linear(x, w, b), num_heads);
  };
  const Tensor<4> q = project(query, 0), k = project(key, 1), v = project(value, 2);
  std::optional<Tensor<4, Bool>> mask = combine_masks(op, masks, batch, queries, keys);

  Tensor<4> heads = q;
  if (dropout > 0.0 && query.device().is_autodiff()) {
    // Dropout acts on the attention weights, so the weights are formed here explicitly.
    const double scale = 1.0 / std::sqrt(static_cast<double>(embed / num_heads));
    Tensor<4> scores = q.matmul(k.swap_dims(2, 3)) * scale;
    std::optional<Tensor<4, Bool>> excluded = mask;
    if (masks.is_causal) {
      const Shape& full = scores.shape();
      const Tensor<4, Bool> future =
          causal_mask(queries, keys, query.device().without_autodiff()).expand<4>(full);
      excluded = excluded ? excluded->expand<4>(full).logical_or(future) : future;
    }
    if (excluded) scores = scores.mask_fill(*excluded, -std::numeric_limits<double>::infinity());
    Tensor<4> weights = activation::softmax(scores, 3);
    // A query with every key excluded gets zero weights (softmax gave NaN), as the attention
    // op does.
    if (excluded) weights = weights.mask_fill(excluded->all_dim(3), 0.0);
    heads = Dropout{dropout}.forward(weights).matmul(v);
  } else {
    heads =
        module::attention(q, k, v, mask, std::nullopt,
                          AttentionOptions{.scale = std::nullopt, .is_causal = masks.is_causal});
  }
  return out_proj.forward(heads.swap_dims(1, 2).reshape<3>(Shape{batch, queries, embed}));
}

}  // namespace kiln::nn
