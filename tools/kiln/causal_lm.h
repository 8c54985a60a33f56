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

}  // namespace kiln::tools
