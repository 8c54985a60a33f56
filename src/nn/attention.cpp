#include "kiln/nn/attention.h"

#include "kiln/detail/format.h"
#include "kiln/nn/dropout.h"
#include "nn/attention_heads.h"

namespace kiln::nn {
namespace {

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
    const Tensor<2, Bool>& m = masks.attn_mask->excluded();
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
  const Tensor<2> packed = in_proj_weight.forward_value();
  auto project = [&](const Tensor<3>& x, std::int64_t part) {
    std::optional<Tensor<1>> b;
    if (in_proj_bias) b = in_proj_bias->val().narrow(0, part * embed, embed);
    const Tensor<2> w = packed.narrow(0, part * embed, embed);
    return detail::split_heads(module::linear(x, w, b), num_heads);
  };
  const Tensor<4> q = project(query, 0), k = project(key, 1), v = project(value, 2);
  std::optional<Tensor<4, Bool>> mask = combine_masks(op, masks, batch, queries, keys);

  const Tensor<4> heads = detail::attend_heads(q, k, v, mask, masks.is_causal,
                                               query.device().is_autodiff() ? dropout : 0.0);
  return out_proj.forward(detail::merge_heads(heads));
}

}  // namespace kiln::nn
