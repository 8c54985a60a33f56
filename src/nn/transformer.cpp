#include "kiln/nn/transformer.h"

#include "kiln/activation.h"
#include "kiln/detail/format.h"

namespace kiln::nn {

TransformerEncoderLayer TransformerEncoderLayerConfig::init(const Device& device) const {
  if (dim_feedforward <= 0) {
    kiln::detail::fail<InvalidArgument>("TransformerEncoderLayerConfig::init", "dim_feedforward ",
                                        dim_feedforward, " must be positive");
  }
  TransformerEncoderLayer layer;
  layer.self_attn = MultiHeadAttentionConfig{d_model, nhead, dropout, bias}.init(device);
  layer.linear1 = LinearConfig{d_model, dim_feedforward, bias}.init(device);
  layer.linear2 = LinearConfig{dim_feedforward, d_model, bias}.init(device);
  layer.norm1 = LayerNormConfig{d_model, layer_norm_eps, true, bias}.init(device);
  layer.norm2 = LayerNormConfig{d_model, layer_norm_eps, true, bias}.init(device);
  layer.dropout = Dropout{dropout};
  layer.dropout1 = Dropout{dropout};
  layer.dropout2 = Dropout{dropout};
  layer.activation = activation;
  layer.norm_first = norm_first;
  return layer;
}

Tensor<3> TransformerEncoderLayer::forward(const Tensor<3>& x, const AttentionMasks& masks) const {
  auto attention_block = [&](const Tensor<3>& h) {
    return dropout1.forward(self_attn.forward(h, masks));
  };
  auto feed_forward_block = [&](const Tensor<3>& h) {
    Tensor<3> hidden = linear1.forward(h);
    hidden = activation == FeedForwardActivation::Gelu ? kiln::activation::gelu(hidden)
                                                       : kiln::activation::relu(hidden);
    return dropout2.forward(linear2.forward(dropout.forward(hidden)));
  };
  if (norm_first) {
    const Tensor<3> h = x + attention_block(norm1.forward(x));
    return h + feed_forward_block(norm2.forward(h));
  }
  const Tensor<3> h = norm1.forward(x + attention_block(x));
  return norm2.forward(h + feed_forward_block(h));
}

TransformerEncoder TransformerEncoderConfig::init(const Device& device) const {
  if (num_layers <= 0) {
    kiln::detail::fail<InvalidArgument>("TransformerEncoderConfig::init", "num_layers ", num_layers,
                                        " must be positive");
  }
  TransformerEncoder encoder;
  for (std::int64_t i = 0; i < num_layers; ++i) encoder.layers.push_back(layer.init(device));
  if (final_norm) {
    encoder.norm =
        LayerNormConfig{layer.d_model, layer.layer_norm_eps, true, layer.bias}.init(device);
  }
  return encoder;
}

Tensor<3> TransformerEncoder::forward(const Tensor<3>& x, const AttentionMasks& masks) const {
  Tensor<3> h = x;
  for (const TransformerEncoderLayer& layer : layers) h = layer.forward(h, masks);
  return norm ? norm->forward(h) : h;
}

}  // namespace kiln::nn
