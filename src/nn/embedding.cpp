#include "kiln/nn/embedding.h"

#include "kiln/detail/format.h"

namespace kiln::nn {

Embedding EmbeddingConfig::init(const Device& device) const {
  const char* op = "EmbeddingConfig::init";
  if (num_embeddings <= 0 || embedding_dim <= 0) {
    kiln::detail::fail<InvalidArgument>(op, "num_embeddings ", num_embeddings,
                                        " and embedding_dim ", embedding_dim,
                                        " must both be positive");
  }
  Embedding layer;
  Tensor<2> weight = initializer.init<2>(Shape{num_embeddings, embedding_dim}, device);
  if (padding_idx) {
    const std::int64_t row = *padding_idx < 0 ? *padding_idx + num_embeddings : *padding_idx;
    if (row < 0 || row >= num_embeddings) {
      kiln::detail::fail<InvalidArgument>(op, "padding_idx ", *padding_idx,
                                          " is outside the table of ", num_embeddings, " rows");
    }
    weight = weight.slice_fill({Slice::index(row)}, 0.0);
    layer.padding_idx = row;
  }
  layer.weight = Param<2>(weight);
  return layer;
}

template <std::size_t D>
requires(D >= 1 && D <= 4) Tensor<D + 1> Embedding::forward(const Tensor<D, Int>& indices)
const {
  const Tensor<D + 1> rows = module::embedding(weight.forward_value(), indices);
  if (!padding_idx || !rows.is_require_grad()) return rows;
  // Positions that read the padding row take its value cut from the graph, so that row
  // gets no gradient.
  const Tensor<D + 1, Bool> padding = indices.equal_elem(*padding_idx).unsqueeze(D);
  return rows.mask_where(padding, rows.detach());
}

template Tensor<2> Embedding::forward<1>(const Tensor<1, Int>&) const;
template Tensor<3> Embedding::forward<2>(const Tensor<2, Int>&) const;
template Tensor<4> Embedding::forward<3>(const Tensor<3, Int>&) const;
template Tensor<5> Embedding::forward<4>(const Tensor<4, Int>&) const;

}  // namespace kiln::nn
