// Embedding: a lookup table of num_embeddings rows of embedding_dim values (PyTorch's
// nn.Embedding: weight [num, dim], initialised from N(0, 1)).
//
//   nn::Embedding emb = nn::EmbeddingConfig{.num_embeddings = 100, .embedding_dim = 16}.init(dev);
//   Tensor<3> e = emb.forward(tokens);   // tokens Tensor<2, Int> [B, S] -> [B, S, 16]
#pragma once

#include <cstdint>
#include <optional>

#include "kiln/module_ops.h"
#include "kiln/nn/init.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

struct Embedding {
  Param<2> weight;  // [num_embeddings, embedding_dim]
  // As PyTorch's padding_idx: this row starts at zero and receives no gradient (its value is
  // still looked up as it is).
  std::optional<std::int64_t> padding_idx;
  KILN_MODULE(weight)

  std::int64_t num_embeddings() const { return weight.val().dims()[0]; }
  std::int64_t embedding_dim() const { return weight.val().dims()[1]; }

  // indices [...] -> [..., embedding_dim]; an index outside [0, num_embeddings) throws
  // InvalidArgument.
  template <std::size_t D>
  requires(D >= 1 && D <= 4) Tensor<D + 1> forward(const Tensor<D, Int>& indices)
  const;
};

struct EmbeddingConfig {
  std::int64_t num_embeddings;
  std::int64_t embedding_dim;
  // Negative values count from the end, as in PyTorch.
  std::optional<std::int64_t> padding_idx = std::nullopt;
  Initializer initializer = Initializer::normal(0.0, 1.0);

  Embedding init(const Device& device = Device::default_device()) const;
};

}  // namespace kiln::nn
