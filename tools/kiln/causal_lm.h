// The causal language model of `kiln train charlm`: token and position embeddings, a pre-norm
// TransformerEncoder run with the causal cut, and a linear head. Shared with bench/train_bench.cpp,
// whose gpt2_step rows build it at GPT-2-small's size.
#pragma once

#include <kiln/kiln.h>
#include <kiln/nn/nn.h>

namespace kiln::tools {

struct CausalLm {
  nn::Embedding tokens, positions;
  nn::TransformerEncoder encoder;
  nn::Linear head;
  KILN_MODULE(tokens, positions, encoder, head)

  // ids [batch, length] -> logits [batch, length, vocabulary]
  Tensor<3> forward(const Tensor<2, Int>& ids) const {
    const auto where = Tensor<1, Int>::arange(0, ids.dims()[1], ids.device()).unsqueeze(0);
    const Tensor<3> h = tokens.forward(ids) + positions.forward(where);
    return head.forward(encoder.forward(h, {.is_causal = true}));
  }
};

// GPT-2-small's shape with `layers` pre-norm causal layers and `positions` positions: width 768,
// 12 heads, feed-forward 3,072 with GELU, no dropout, vocabulary 50,304, an untied head, weights
// drawn from N(0, 0.02) as GPT-2 draws them (bench/train_bench.cpp's gpt2_step, its probe).
inline constexpr std::int64_t kGpt2Vocabulary = 50304;
inline CausalLm gpt2_small(const Device& device, std::int64_t layers, std::int64_t positions) {
  const std::int64_t width = 768, vocabulary = kGpt2Vocabulary;
  const nn::Initializer small = nn::Initializer::normal(0, 0.02);
  return CausalLm{
      nn::EmbeddingConfig{vocabulary, width, std::nullopt, small}.init(device),
      nn::EmbeddingConfig{positions, width, std::nullopt, small}.init(device),
      nn::TransformerEncoderConfig{.layer = {.d_model = width,
                                             .nhead = 12,
                                             .dim_feedforward = 4 * width,
                                             .dropout = 0.0,
                                             .activation = nn::FeedForwardActivation::Gelu,
                                             .norm_first = true},
                                   .num_layers = layers,
                                   .final_norm = true}
          .init(device),
      nn::LinearConfig{width, vocabulary}.init(device)};
}

}  // namespace kiln::tools
