// Multi-head attention with PyTorch's nn.MultiheadAttention parameters: one packed input
// projection in_proj_weight [3E, E] (rows: query, key, value) and in_proj_bias [3E], and an output
// projection out_proj (a Linear E -> E), so state dicts interchange with PyTorch (the case
// kdim = vdim = embed_dim, no add_bias_kv). Inputs are batch first: [batch, sequence, embed]
// (PyTorch's batch_first=True).
//
//   nn::MultiHeadAttention mha = nn::MultiHeadAttentionConfig{.embed_dim = 64, .num_heads =
//   4}.init(dev); Tensor<3> y = mha.forward(x, {.key_padding_mask = pad, .is_causal = true});   //
//   self-attention Tensor<3> z = mha.forward(q, memory, memory); // cross-attention
#pragma once

#include <cstdint>
#include <optional>

#include "kiln/module_ops.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

// Which keys a query may not attend to; every mask given is combined (a key excluded by any of
// them is excluded). A query whose keys are all excluded has no distribution.
struct AttentionMasks {
  // [batch, key_len]: true marks a padding key (PyTorch's boolean key_padding_mask).
  std::optional<Tensor<2, Bool>> key_padding_mask = std::nullopt;
  // [query_len, key_len]: the (query, key) pairs left out, its polarity said where it is made
  // (module::AttentionMask<2>::exclude(m) for PyTorch's boolean attn_mask of nn.MultiheadAttention,
  // ::attend(m) for scaled_dot_product_attention's).
  std::optional<module::AttentionMask<2>> attn_mask = std::nullopt;
  // Query i sees keys j <= i.
  bool is_causal = false;
};

struct MultiHeadAttention {
  Param<2> in_proj_weight;               // [3 * embed_dim, embed_dim]
  std::optional<Param<1>> in_proj_bias;  // [3 * embed_dim]
  Linear out_proj;                       // weight [embed_dim, embed_dim], bias [embed_dim]
  std::int64_t num_heads = 1;
  // Dropout on the attention weights, in training (inputs on an autodiff device) only.
  double dropout = 0.0;
  KILN_MODULE(in_proj_weight, in_proj_bias, out_proj)

  std::int64_t embed_dim() const { return in_proj_weight.val().dims()[1]; }

  // query [B, Sq, E], key and value [B, Sk, E] -> [B, Sq, E].
  Tensor<3> forward(const Tensor<3>& query, const Tensor<3>& key, const Tensor<3>& value,
                    const AttentionMasks& masks = {}) const;
  // Self-attention: forward(x, x, x, masks).
  Tensor<3> forward(const Tensor<3>& x, const AttentionMasks& masks = {}) const {
    return forward(x, x, x, masks);
  }
};

// PyTorch's initialisation: in_proj_weight Xavier-uniform over the whole [3E, E] matrix, biases
// zero, out_proj.weight as a Linear's (uniform in ±1/sqrt(E)).
struct MultiHeadAttentionConfig {
  std::int64_t embed_dim;
  std::int64_t num_heads;
  double dropout = 0.0;
  bool bias = true;  // in_proj_bias and out_proj.bias

  MultiHeadAttention init(const Device& device = Device::default_device()) const;
};

}  // namespace kiln::nn
