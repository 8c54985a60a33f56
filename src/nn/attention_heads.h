// Attention over heads, shared by the layers that project their own heads (MultiHeadAttention,
// BERT's self-attention): the split into heads, the attention op itself or, with dropout on the
// weights, the weights formed explicitly, and the merge back.
#pragma once

#include <cstdint>
#include <optional>

#include "kiln/tensor.h"

namespace kiln::nn::detail {

// [B, S, E] -> [B, H, S, E / H]: head h takes features [h * E / H, (h + 1) * E / H).
Tensor<4> split_heads(const Tensor<3>& x, std::int64_t heads);
// [B, H, S, D] -> [B, S, H * D].
Tensor<3> merge_heads(const Tensor<4>& x);

// softmax(q kᵀ / sqrt(D), excluded and, with is_causal, later keys left out) v; a query with
// every key excluded gets zero weights. dropout > 0 drops attention weights inside the fused op
// (callers pass 0 outside training).
Tensor<4> attend_heads(const Tensor<4>& q, const Tensor<4>& k, const Tensor<4>& v,
                       const std::optional<Tensor<4, Bool>>& excluded, bool is_causal,
                       double dropout);

}  // namespace kiln::nn::detail
