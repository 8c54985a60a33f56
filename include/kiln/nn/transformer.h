// Transformer encoder layers with PyTorch's nn.TransformerEncoderLayer parameter names
// (self_attn.in_proj_weight, linear1.weight, norm1.weight, ...) and batch-first inputs
// [batch, sequence, d_model].
//
//   auto layer = nn::TransformerEncoderLayerConfig{.d_model = 64, .nhead = 4,
//                                                  .dim_feedforward = 256, .norm_first =
//                                                  true}.init(dev);
//   Tensor<3> y = layer.forward(x, {.is_causal = true});
//   auto encoder = nn::TransformerEncoderConfig{.layer = {...}, .num_layers = 4}.init(dev);
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kiln/nn/attention.h"
#include "kiln/nn/dropout.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/norm.h"

namespace kiln::nn {

enum class FeedForwardActivation : std::uint8_t { Relu, Gelu };

// Self-attention and a feed-forward block, each with a residual connection.
//   post-norm (norm_first = false, PyTorch's default):
//     x = norm1(x + dropout1(self_attn(x)));  x = norm2(x + dropout2(ff(x)))
//   pre-norm (norm_first = true):
//     x = x + dropout1(self_attn(norm1(x)));  x = x + dropout2(ff(norm2(x)))
// with ff(x) = linear2(dropout(activation(linear1(x)))). The dropouts act in training only.
struct TransformerEncoderLayer {
  MultiHeadAttention self_attn;
  Linear linear1;  // d_model -> dim_feedforward
  Linear linear2;  // dim_feedforward -> d_model
  LayerNorm norm1;
  LayerNorm norm2;
  Dropout dropout;   // inside the feed-forward block
  Dropout dropout1;  // on the attention branch
  Dropout dropout2;  // on the feed-forward branch
  FeedForwardActivation activation = FeedForwardActivation::Relu;
  bool norm_first = false;
  KILN_MODULE(self_attn, linear1, linear2, norm1, norm2)

  Tensor<3> forward(const Tensor<3>& x, const AttentionMasks& masks = {}) const;
};

struct TransformerEncoderLayerConfig {
  std::int64_t d_model;
  std::int64_t nhead;
  std::int64_t dim_feedforward = 2048;
  double dropout = 0.1;  // every dropout of the layer, attention weights included (as PyTorch)
  FeedForwardActivation activation = FeedForwardActivation::Relu;
  double layer_norm_eps = 1e-5;
  bool norm_first = false;
  bool bias = true;  // of the linear layers and the layer norms

  TransformerEncoderLayer init(const Device& device = Device::default_device()) const;
};

// A stack of encoder layers (PyTorch's nn.TransformerEncoder: layers.0..., then an optional
// final norm, which pre-norm stacks usually have). Each layer is initialised on its own.
struct TransformerEncoder {
  std::vector<TransformerEncoderLayer> layers;
  std::optional<LayerNorm> norm;
  KILN_MODULE(layers, norm)

  Tensor<3> forward(const Tensor<3>& x, const AttentionMasks& masks = {}) const;
};

struct TransformerEncoderConfig {
  TransformerEncoderLayerConfig layer;
  std::int64_t num_layers;
  bool final_norm = false;

  TransformerEncoder init(const Device& device = Device::default_device()) const;
};

}  // namespace kiln::nn
