// A sentence-transformers model (a BERT-family encoder, its pooling and an optional
// normalisation) read from the directory sentence-transformers saves, so that texts become
// embeddings without Python:
//
//   auto encoder = text::SentenceEncoder::from_directory("all-MiniLM-L6-v2", dev);
//   Tensor<2> e = encoder.encode({"A man is eating food.", "Someone eats."});  // [2, 384]
//
// What it reads: modules.json (a Transformer, a Pooling and an optional Normalize module; a plain
// transformers directory without it means mean pooling), the encoder's config.json and
// model.safetensors (nn::BertModel::from_pretrained), the tokenizer (WordPieceTokenizer::
// from_directory, truncating to sentence_bert_config.json's max_seq_length), and the pooling's
// config.json. The results equal sentence-transformers' encode() to float rounding.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/nn/bert.h"
#include "kiln/text/wordpiece.h"

namespace kiln::text {

// How a sequence's token states [seq, hidden] become one vector (padding never counts), as
// sentence-transformers' Pooling modes: the [CLS] state, the mean, the maximum, or the sum over
// the square root of the token count.
enum class Pooling : std::uint8_t { Cls, Mean, Max, MeanSqrtLen };

// hidden [batch, seq, size] with attention_mask [batch, seq] (1 = a token, 0 = padding) ->
// [batch, size].
Tensor<2> pool(const Tensor<3>& hidden, const Tensor<2, Int>& attention_mask, Pooling pooling);

struct SentenceEncoder {
  WordPieceTokenizer tokenizer;
  nn::BertModel model;
  Pooling pooling = Pooling::Mean;
  bool normalize = false;  // each embedding divided by its L2 norm (a Normalize module)

  // InvalidArgument naming the file and entry for a directory sentence-transformers did not
  // write, or a module kiln does not run (Dense, a pooling mode other than the four above).
  static SentenceEncoder from_directory(const std::filesystem::path& dir,
                                        const Device& device = Device::default_device());

  // One embedding per text, [texts.size(), dimension()]; the texts are encoded as one batch,
  // padded to the longest. An empty list gives [0, dimension()].
  Tensor<2> encode(const std::vector<std::string>& texts) const;
  std::int64_t dimension() const { return model.hidden_size(); }
};

}  // namespace kiln::text
