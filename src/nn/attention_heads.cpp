#include "nn/attention_heads.h"

#include <cmath>
#include <limits>

#include "kiln/activation.h"
#include "kiln/module_ops.h"
#include "kiln/nn/dropout.h"

namespace kiln::nn::detail {
namespace {

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

Tensor<4> split_heads(const Tensor<3>& x, std::int64_t heads) {
  const auto [batch, length, embed] = x.dims();
  return x.reshape<4>(Shape{batch, length, heads, embed / heads}).swap_dims(1, 2);
}

Tensor<3> merge_heads(const Tensor<4>& x) {
  const auto [batch, heads, length, dim] = x.dims();
  return x.swap_dims(1, 2).reshape<3>(Shape{batch, length, heads * dim});
}

Tensor<4> attend_heads(const Tensor<4>& q, const Tensor<4>& k, const Tensor<4>& v,
                       const std::optional<Tensor<4, Bool>>& excluded, bool is_causal,
                       double dropout) {
  if (dropout <= 0.0) {
    return module::attention(
        q, k, v,
        excluded ? std::optional(module::AttentionMask<4>::exclude(*excluded)) : std::nullopt,
        std::nullopt, AttentionOptions{.scale = std::nullopt, .is_causal = is_causal});
  }
  // Dropout acts on the attention weights, so the weights are formed here explicitly.
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.dims()[3]));
  Tensor<4> scores = q.matmul(k.swap_dims(2, 3)) * scale;
  std::optional<Tensor<4, Bool>> left_out = excluded;
  if (is_causal) {
    const Shape& full = scores.shape();
    const Tensor<4, Bool> future =
        causal_mask(q.dims()[2], k.dims()[2], q.device().without_autodiff()).expand<4>(full);
    left_out = left_out ? left_out->expand<4>(full).logical_or(future) : future;
  }
  if (left_out) scores = scores.mask_fill(*left_out, -std::numeric_limits<double>::infinity());
  Tensor<4> weights = activation::softmax(scores, 3);
  // A query with every key excluded gets zero weights (softmax gave NaN), as the attention op
  // does.
  if (left_out) weights = weights.mask_fill(left_out->all_dim(3), 0.0);
  return Dropout{dropout}.forward(weights).matmul(v);
}

}  // namespace kiln::nn::detail
