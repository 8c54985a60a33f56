// BERT encoders (BertModel of Hugging Face transformers: BERT, MiniLM, all-MiniLM-*, bge-*, e5-*
// and the other BERT-shaped sentence encoders) with the checkpoints' own parameter names, so a
// model.safetensors written by transformers loads as it is:
//
//   nn::BertModel bert = nn::BertModel::from_pretrained("all-MiniLM-L6-v2", dev);  // config.json
//   Tensor<3> hidden = bert.forward(ids, {.attention_mask = mask});   // [batch, seq, hidden]
//
// The layers are post-norm, as BERT's: x = LayerNorm(x + attention(x)), then
// x = LayerNorm(x + dense(act(dense(x)))). Dropout acts in training only (inputs on an autodiff
// device), as transformers' module.train().
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "kiln/nn/embedding.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/module.h"
#include "kiln/nn/norm.h"

namespace kiln::nn {

// transformers' hidden_act names: "gelu" (erf), "gelu_new" and "gelu_pytorch_tanh" (the tanh
// form), "relu", "silu" ("swish").
enum class BertActivation : std::uint8_t { Gelu, GeluTanh, Relu, Silu };

struct BertEmbeddings {
  Embedding word_embeddings;        // [vocab_size, hidden]
  Embedding position_embeddings;    // [max_position_embeddings, hidden]
  Embedding token_type_embeddings;  // [type_vocab_size, hidden]
  LayerNorm layer_norm;
  double dropout = 0.0;
  KILN_MODULE(word_embeddings, position_embeddings, token_type_embeddings,
              KILN_NAMED(layer_norm, "LayerNorm"))

  // input_ids and token_type_ids [batch, seq] -> [batch, seq, hidden]; positions 0..seq-1.
  Tensor<3> forward(const Tensor<2, Int>& input_ids, const Tensor<2, Int>& token_type_ids) const;
};

struct BertSelfAttention {
  Linear query, key, value;  // hidden -> hidden each
  KILN_MODULE(query, key, value)
};

// dense, then LayerNorm over the sum with the block's input (BertSelfOutput and BertOutput).
struct BertResidualOutput {
  Linear dense;
  LayerNorm layer_norm;
  double dropout = 0.0;
  KILN_MODULE(dense, KILN_NAMED(layer_norm, "LayerNorm"))

  Tensor<3> forward(const Tensor<3>& hidden, const Tensor<3>& input) const;
};

struct BertAttention {
  BertSelfAttention self_attention;
  BertResidualOutput output;
  KILN_MODULE(KILN_NAMED(self_attention, "self"), output)
};

struct BertIntermediate {
  Linear dense;  // hidden -> intermediate
  KILN_MODULE(dense)
};

struct BertLayer {
  BertAttention attention;
  BertIntermediate intermediate;
  BertResidualOutput output;
  KILN_MODULE(attention, intermediate, output)
};

struct BertEncoder {
  std::vector<BertLayer> layer;
  KILN_MODULE(layer)
};

// tanh(dense(hidden[:, 0])): the [CLS] token's summary BertForSequenceClassification reads.
struct BertPooler {
  Linear dense;
  KILN_MODULE(dense)
};

// What a forward pass reads besides the token ids, as transformers names it.
struct BertInputs {
  // [batch, seq]: 1 for a token that is attended, 0 for padding (transformers' attention_mask,
  // what a tokenizer's batch gives). Every token is attended when absent.
  std::optional<Tensor<2, Int>> attention_mask = std::nullopt;
  // [batch, seq]: the segment of each token (zeros when absent).
  std::optional<Tensor<2, Int>> token_type_ids = std::nullopt;
  // With an attention_mask: the projections, feed-forward layers and norms run on the attended
  // tokens only (gathered into one matrix; the attention itself on the padded batch), and the
  // padding's rows of the result are zeros, as torch's nested-tensor encoder leaves them. Every
  // attended token's state is the one the full computation gives (up to summation order); what
  // transformers writes at padded positions (their attention over the real tokens) is not
  // computed. For pooling with the mask (SentenceEncoder, `kiln embed`), which reads no padded
  // row: a batch of mixed lengths costs its real tokens, not batch x longest.
  bool skip_padding = false;
};

struct BertModel {
  BertEmbeddings embeddings;
  BertEncoder encoder;
  std::optional<BertPooler> pooler;
  std::int64_t num_attention_heads = 12;
  BertActivation activation = BertActivation::Gelu;
  double attention_dropout = 0.0;
  KILN_MODULE(embeddings, encoder, pooler)

  std::int64_t hidden_size() const { return embeddings.word_embeddings.weight.val().dims()[1]; }

  // input_ids [batch, seq] -> the last hidden state [batch, seq, hidden]. InvalidArgument for a
  // sequence longer than max_position_embeddings; ShapeMismatch for inputs of other shapes.
  Tensor<3> forward(const Tensor<2, Int>& input_ids, const BertInputs& inputs = {}) const;
  // The pooler's output [batch, hidden] (InvalidArgument when the model has no pooler).
  Tensor<2> pool(const Tensor<3>& hidden) const;

  // A model directory as transformers writes it (config.json and model.safetensors; a
  // checkpoint of a model with heads, BertForMaskedLM say, gives its "bert." backbone, heads
  // ignored), or a .safetensors file beside its config.json. Nothing is drawn at random: the
  // parameters come from the file.
  static BertModel from_pretrained(const std::filesystem::path& path,
                                   const Device& device = Device::default_device());
};

// transformers' BertConfig, with its defaults (bert-base-uncased).
struct BertConfig {
  std::int64_t vocab_size = 30522;
  std::int64_t hidden_size = 768;
  std::int64_t num_hidden_layers = 12;
  std::int64_t num_attention_heads = 12;
  std::int64_t intermediate_size = 3072;
  BertActivation hidden_act = BertActivation::Gelu;
  std::int64_t max_position_embeddings = 512;
  std::int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  double initializer_range = 0.02;  // weights drawn from N(0, initializer_range), as transformers
  bool add_pooling_layer = true;

  // config.json's fields (absent ones keep the defaults). InvalidArgument naming the file and
  // field for a field of the wrong type, a hidden_act kiln lacks, or a model_type other than
  // BERT's; a position_embedding_type other than "absolute" is refused too.
  static BertConfig from_json_file(const std::filesystem::path& config_json);

  BertModel init(const Device& device = Device::default_device()) const;
};

}  // namespace kiln::nn
