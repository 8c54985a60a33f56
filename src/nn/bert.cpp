#include "kiln/nn/bert.h"

#include <cmath>
#include <string>

#include "kiln/activation.h"
#include "kiln/detail/format.h"
#include "kiln/nn/dropout.h"
#include "kiln/nn/record.h"
#include "kiln/record/safetensors.h"
#include "nn/attention_heads.h"
#include "text/files.h"

namespace kiln::nn {
namespace {

using text::detail::Json;

Tensor<3> activate(const Tensor<3>& x, BertActivation act) {
  switch (act) {
    case BertActivation::Gelu:
      return activation::gelu(x);
    case BertActivation::GeluTanh:
      return activation::gelu_tanh(x);
    case BertActivation::Relu:
      return activation::relu(x);
    case BertActivation::Silu:
      return activation::silu(x);
  }
  return x;
}

BertActivation parse_activation(const std::string& name, const std::string& origin) {
  if (name == "gelu") return BertActivation::Gelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") {
    return BertActivation::GeluTanh;
  }
  if (name == "relu") return BertActivation::Relu;
  if (name == "silu" || name == "swish") return BertActivation::Silu;
  kiln::detail::fail<InvalidArgument>("BertConfig::from_json_file", origin, ": hidden_act '", name,
                                      "' is not one of gelu, gelu_new, gelu_pytorch_tanh, ",
                                      "gelu_fast, relu, silu, swish");
}

// The attended tokens of a padded batch as rows of one matrix (BertInputs::skip_padding), kept
// as [1, tokens, width] so that the layers take them as a batch of one.
struct TokenRows {
  Tensor<1, Int> index;  // positions in the flattened [batch * seq]
  std::int64_t batch, length;

  // x [batch, seq, width] -> its attended rows [1, tokens, width].
  Tensor<3> gather(const Tensor<3>& x) const {
    const std::int64_t width = x.dims()[2];
    const Tensor<2> kept = x.reshape<2>(Shape{batch * length, width}).select(0, index);
    return kept.reshape<3>(Shape{1, kept.dims()[0], width});
  }
  // rows [1, tokens, width] -> [batch, seq, width], zeros at the padding.
  Tensor<3> scatter(const Tensor<3>& rows) const {
    const std::int64_t width = rows.dims()[2];
    return Tensor<2>::zeros({batch * length, width}, rows.device(), rows.dtype())
        .select_assign(0, index, rows.reshape<2>(Shape{rows.dims()[1], width}),
                       IndexingUpdate::Assign)
        .reshape<3>(Shape{batch, length, width});
  }
};

// One layer over x [batch, seq, hidden], or with rows, over the attended tokens' states
// x [1, tokens, hidden].
Tensor<3> layer_forward(const BertLayer& layer, const Tensor<3>& x,
                        const std::optional<Tensor<4, Bool>>& excluded, std::int64_t heads,
                        BertActivation act, double attention_dropout,
                        const std::optional<TokenRows>& rows) {
  const BertSelfAttention& self = layer.attention.self_attention;
  auto padded = [&](const Tensor<3>& t) { return rows ? rows->scatter(t) : t; };
  const Tensor<4> q = detail::split_heads(padded(self.query.forward(x)), heads);
  const Tensor<4> k = detail::split_heads(padded(self.key.forward(x)), heads);
  const Tensor<4> v = detail::split_heads(padded(self.value.forward(x)), heads);
  const double dropout = x.device().is_autodiff() ? attention_dropout : 0.0;
  Tensor<3> context = detail::merge_heads(detail::attend_heads(q, k, v, excluded, false, dropout));
  if (rows) context = rows->gather(context);
  const Tensor<3> attended = layer.attention.output.forward(context, x);
  return layer.output.forward(activate(layer.intermediate.dense.forward(attended), act), attended);
}

}  // namespace

Tensor<3> BertEmbeddings::forward(const Tensor<2, Int>& input_ids,
                                  const Tensor<2, Int>& token_type_ids) const {
  const std::int64_t length = input_ids.dims()[1];
  const std::int64_t hidden = word_embeddings.weight.val().dims()[1];
  const Tensor<2> positions =
      position_embeddings.forward(Tensor<1, Int>::arange(0, length, input_ids.device()));
  const Tensor<3> x = word_embeddings.forward(input_ids) +
                      token_type_embeddings.forward(token_type_ids) +
                      positions.reshape<3>(Shape{1, length, hidden});
  return Dropout{dropout}.forward(layer_norm.forward(x));
}

Tensor<3> BertResidualOutput::forward(const Tensor<3>& hidden, const Tensor<3>& input) const {
  return layer_norm.forward(Dropout{dropout}.forward(dense.forward(hidden)) + input);
}

Tensor<3> BertModel::forward(const Tensor<2, Int>& input_ids, const BertInputs& inputs) const {
  const char* op = "BertModel::forward";
  const auto [batch, length] = input_ids.dims();
  const std::int64_t max_positions = embeddings.position_embeddings.weight.val().dims()[0];
  if (length > max_positions) {
    kiln::detail::fail<InvalidArgument>(op, "input_ids ", input_ids.shape().to_string(), " has ",
                                        length, " tokens; the model takes at most ", max_positions,
                                        " (max_position_embeddings)");
  }
  auto check = [&](const char* name, const std::optional<Tensor<2, Int>>& t) {
    if (t && t->shape() != input_ids.shape()) {
      kiln::detail::fail<ShapeMismatch>(op, name, " ", t->shape().to_string(),
                                        " must have input_ids' shape ",
                                        input_ids.shape().to_string());
    }
  };
  check("attention_mask", inputs.attention_mask);
  check("token_type_ids", inputs.token_type_ids);
  const Tensor<2, Int> types = inputs.token_type_ids.value_or(
      Tensor<2, Int>::zeros(input_ids.shape(), input_ids.device(), input_ids.dtype()));
  std::optional<Tensor<4, Bool>> excluded;
  if (inputs.attention_mask) {
    excluded = inputs.attention_mask->equal_elem(0).reshape<4>(Shape{batch, 1, 1, length});
  }
  Tensor<3> x = embeddings.forward(input_ids, types);
  std::optional<TokenRows> rows;
  if (inputs.skip_padding && inputs.attention_mask) {
    const Tensor<2, Int> where = inputs.attention_mask->reshape<1>(Shape{batch * length}).nonzero();
    rows = TokenRows{where.reshape<1>(Shape{where.dims()[0]}), batch, length};
    x = rows->gather(x);
  }
  for (const BertLayer& layer : encoder.layer) {
    x = layer_forward(layer, x, excluded, num_attention_heads, activation, attention_dropout, rows);
  }
  if (rows) return rows->scatter(x);
  return x;
}

Tensor<2> BertModel::pool(const Tensor<3>& hidden) const {
  if (!pooler) {
    kiln::detail::fail<InvalidArgument>("BertModel::pool",
                                        "the model has no pooler (add_pooling_layer false, or a "
                                        "checkpoint without pooler.dense)");
  }
  const Shape first{hidden.dims()[0], hidden.dims()[2]};  // the [CLS] state of each sequence
  return pooler->dense.forward(hidden.narrow(1, 0, 1).reshape<2>(first)).tanh();
}

BertConfig BertConfig::from_json_file(const std::filesystem::path& config_json) {
  const char* op = "BertConfig::from_json_file";
  const std::string origin = config_json.string();
  const Json json = text::detail::read_json_file(config_json, op);
  if (!json.is_object()) kiln::detail::fail<InvalidArgument>(op, origin, " is not a JSON object");
  BertConfig config;
  auto read = [&](const char* field, auto& into) {
    const auto it = json.find(field);
    if (it == json.end() || it->is_null()) return;
    try {
      into = it->template get<std::remove_reference_t<decltype(into)>>();
    } catch (const Json::exception&) {
      kiln::detail::fail<InvalidArgument>(op, origin, ": field '", field, "' has the wrong type (",
                                          it->type_name(), ")");
    }
  };
  std::string model_type = "bert", hidden_act = "gelu", position_type = "absolute";
  read("model_type", model_type);
  if (model_type != "bert") {
    kiln::detail::fail<InvalidArgument>(op, origin, ": model_type '", model_type,
                                        "' is not 'bert'");
  }
  read("position_embedding_type", position_type);
  if (position_type != "absolute") {
    kiln::detail::fail<InvalidArgument>(op, origin, ": position_embedding_type '", position_type,
                                        "' is not supported (only 'absolute')");
  }
  read("vocab_size", config.vocab_size);
  read("hidden_size", config.hidden_size);
  read("num_hidden_layers", config.num_hidden_layers);
  read("num_attention_heads", config.num_attention_heads);
  read("intermediate_size", config.intermediate_size);
  read("hidden_act", hidden_act);
  config.hidden_act = parse_activation(hidden_act, origin);
  read("max_position_embeddings", config.max_position_embeddings);
  read("type_vocab_size", config.type_vocab_size);
  read("layer_norm_eps", config.layer_norm_eps);
  read("hidden_dropout_prob", config.hidden_dropout_prob);
  read("attention_probs_dropout_prob", config.attention_probs_dropout_prob);
  read("initializer_range", config.initializer_range);
  return config;
}

BertModel BertConfig::init(const Device& device) const {
  const char* op = "BertConfig::init";
  for (auto [name, value] : {std::pair{"vocab_size", vocab_size},
                             {"hidden_size", hidden_size},
                             {"num_attention_heads", num_attention_heads},
                             {"intermediate_size", intermediate_size},
                             {"max_position_embeddings", max_position_embeddings},
                             {"type_vocab_size", type_vocab_size}}) {
    if (value <= 0) kiln::detail::fail<InvalidArgument>(op, name, " ", value, " must be positive");
  }
  if (num_hidden_layers < 0 || hidden_size % num_attention_heads != 0) {
    kiln::detail::fail<InvalidArgument>(
        op, "hidden_size ", hidden_size, " must be a multiple of num_attention_heads ",
        num_attention_heads, " and num_hidden_layers ", num_hidden_layers, " not negative");
  }
  nn::detail::check_dropout_probability(hidden_dropout_prob);
  nn::detail::check_dropout_probability(attention_probs_dropout_prob);
  const Initializer weights = Initializer::normal(0.0, initializer_range);
  auto linear = [&](std::int64_t in, std::int64_t out) {
    return LinearConfig{.in_features = in,
                        .out_features = out,
                        .initializer = weights,
                        .bias_initializer = Initializer::zeros()}
        .init(device);
  };
  auto embedding = [&](std::int64_t n) {
    return EmbeddingConfig{
        .num_embeddings = n, .embedding_dim = hidden_size, .initializer = weights}
        .init(device);
  };
  auto norm = [&] {
    return LayerNormConfig{.normalized_size = hidden_size, .epsilon = layer_norm_eps}.init(device);
  };
  auto residual = [&](std::int64_t in) {
    return BertResidualOutput{
        .dense = linear(in, hidden_size), .layer_norm = norm(), .dropout = hidden_dropout_prob};
  };
  BertModel model;
  model.embeddings = BertEmbeddings{.word_embeddings = embedding(vocab_size),
                                    .position_embeddings = embedding(max_position_embeddings),
                                    .token_type_embeddings = embedding(type_vocab_size),
                                    .layer_norm = norm(),
                                    .dropout = hidden_dropout_prob};
  model.encoder.layer.reserve(static_cast<std::size_t>(num_hidden_layers));
  for (std::int64_t i = 0; i < num_hidden_layers; ++i) {
    BertLayer layer;
    layer.attention.self_attention = BertSelfAttention{.query = linear(hidden_size, hidden_size),
                                                       .key = linear(hidden_size, hidden_size),
                                                       .value = linear(hidden_size, hidden_size)};
    layer.attention.output = residual(hidden_size);
    layer.intermediate.dense = linear(hidden_size, intermediate_size);
    layer.output = residual(intermediate_size);
    model.encoder.layer.push_back(std::move(layer));
  }
  if (add_pooling_layer) model.pooler = BertPooler{.dense = linear(hidden_size, hidden_size)};
  model.num_attention_heads = num_attention_heads;
  model.activation = hidden_act;
  model.attention_dropout = attention_probs_dropout_prob;
  return model;
}

BertModel BertModel::from_pretrained(const std::filesystem::path& path, const Device& device) {
  const char* op = "BertModel::from_pretrained";
  const bool is_dir = std::filesystem::is_directory(path);
  const std::filesystem::path dir = is_dir ? path : path.parent_path();
  const std::filesystem::path weights = is_dir ? path / "model.safetensors" : path;
  if (!std::filesystem::exists(weights)) {
    const bool pickled = std::filesystem::exists(dir / "pytorch_model.bin");
    kiln::detail::fail<InvalidArgument>(
        op, weights.string(), " does not exist",
        pickled ? " (the directory has pytorch_model.bin, a pickle kiln does not read: save the "
                  "model with safe_serialization=True)"
                : "");
  }
  BertConfig config = BertConfig::from_json_file(dir / "config.json");
  record::TensorMap tensors = record::load_safetensors(weights);
  // A model with heads keeps its encoder under "bert."; the heads are not the encoder's business.
  const bool nested = tensors.contains("bert.embeddings.word_embeddings.weight");
  const std::string prefix = nested ? "bert." : "";
  config.add_pooling_layer = tensors.contains(prefix + "pooler.dense.weight");
  BertModel model = nn::detail::init_without_drawing(config, device);
  LoadOptions options{.allow_unexpected = nested, .prefix = prefix};
  // Older checkpoints saved the position ids [0, 1, ...] as a buffer; they are implied.
  options.rename = [](std::string_view name) {
    return name == "embeddings.position_ids" ? std::string{} : std::string(name);
  };
  nn::detail::load_record(&model, nn::detail::visit_fn<BertModel>, std::move(tensors), options,
                          weights.string());
  return model;
}

}  // namespace kiln::nn
