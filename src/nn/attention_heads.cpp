#include "nn/attention_heads.h"

#include "kiln/module_ops.h"

namespace kiln::nn::detail {

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
  return module::attention(
      q, k, v,
      excluded ? std::optional(module::AttentionMask<4>::exclude(*excluded)) : std::nullopt,
      std::nullopt,
      AttentionOptions{.scale = std::nullopt, .is_causal = is_causal, .dropout = dropout});
}

}  // namespace kiln::nn::detail
