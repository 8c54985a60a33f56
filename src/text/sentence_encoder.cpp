#include "kiln/text/sentence_encoder.h"

#include <algorithm>
#include <string_view>

#include "kiln/detail/format.h"
#include "text/files.h"

namespace kiln::text {
namespace {

using detail::Json;

// sentence-transformers' Pooling config: exactly one mode kiln runs, named by "pooling_mode"
// (sentence-transformers 5) or by one true pooling_mode_* flag (earlier versions).
Pooling read_pooling(const char* op, const std::filesystem::path& config) {
  const Json json = detail::read_json_file(config, op);
  const std::pair<std::string_view, Pooling> modes[] = {
      {"cls_token", Pooling::Cls},
      {"mean_tokens", Pooling::Mean},
      {"max_tokens", Pooling::Max},
      {"mean_sqrt_len_tokens", Pooling::MeanSqrtLen}};
  const auto named = json.find("pooling_mode");
  if (named != json.end() && named->is_string()) {
    const std::string mode = named->get<std::string>();
    for (const auto& [name, pooling] : modes) {
      // "mean" for "mean_tokens", "cls" for "cls_token", ...
      if (mode == name || name.starts_with(mode + "_")) return pooling;
    }
    kiln::detail::fail<InvalidArgument>(op, config.string(), ": pooling_mode '", mode,
                                        "' is not one kiln runs (cls, mean, max, "
                                        "mean_sqrt_len_tokens)");
  }
  std::optional<Pooling> chosen;
  for (const auto& [key, value] : json.items()) {
    if (!key.starts_with("pooling_mode_") || !value.is_boolean() || !value.get<bool>()) continue;
    const std::string_view mode = std::string_view(key).substr(13);
    const auto known = std::find_if(std::begin(modes), std::end(modes),
                                    [&](const auto& m) { return m.first == mode; });
    if (known == std::end(modes)) {
      kiln::detail::fail<InvalidArgument>(op, config.string(), ": ", key,
                                          " is not a pooling kiln runs");
    }
    if (chosen) {
      kiln::detail::fail<InvalidArgument>(op, config.string(),
                                          ": several pooling modes at once (their concatenation) "
                                          "are not supported");
    }
    chosen = known->second;
  }
  if (!chosen) kiln::detail::fail<InvalidArgument>(op, config.string(), ": no pooling mode is set");
  return *chosen;
}

Tensor<2, Int> int_tensor(std::vector<std::int64_t> values, std::int64_t rows, std::int64_t cols,
                          const Device& device) {
  return Tensor<2, Int>::from_data(TensorData::from_vec(std::move(values), Shape{rows, cols}),
                                   device);
}

}  // namespace

Tensor<2> pool(const Tensor<3>& hidden, const Tensor<2, Int>& attention_mask, Pooling pooling) {
  const auto [batch, length, size] = hidden.dims();
  if (attention_mask.dims()[0] != batch || attention_mask.dims()[1] != length) {
    kiln::detail::fail<ShapeMismatch>(
        "text::pool", "attention_mask ", attention_mask.shape().to_string(),
        " must be hidden's [batch, seq] = [", batch, ", ", length, "]");
  }
  const Shape rows{batch, size};
  if (pooling == Pooling::Cls) return hidden.narrow(1, 0, 1).reshape<2>(rows);
  const Tensor<3, Int> mask = attention_mask.reshape<3>(Shape{batch, length, 1});
  if (pooling == Pooling::Max) {
    // As sentence-transformers: padding at -1e9, below any real state.
    const Tensor<3, Bool> padding = mask.equal_elem(0).expand<3>(hidden.shape());
    return hidden.mask_fill(padding, -1e9).max_dim(1).reshape<2>(rows);
  }
  const Tensor<3> weights = mask.float_(hidden.dtype());
  const Tensor<2> sums = (hidden * weights).sum_dim(1).reshape<2>(rows);
  const Tensor<2> counts = weights.sum_dim(1).reshape<2>(Shape{batch, 1}).clamp_min(1e-9);
  return sums / (pooling == Pooling::Mean ? counts : counts.sqrt());
}

SentenceEncoder SentenceEncoder::from_directory(const std::filesystem::path& dir,
                                                const Device& device) {
  const char* op = "text::SentenceEncoder::from_directory";
  if (!std::filesystem::is_directory(dir)) {
    kiln::detail::fail<InvalidArgument>(op, dir.string(), " is not a directory");
  }
  std::filesystem::path encoder_dir = dir;
  Pooling pooling = Pooling::Mean;
  bool normalize = false;
  const std::filesystem::path modules = dir / "modules.json";
  if (std::filesystem::exists(modules)) {
    const Json list = detail::read_json_file(modules, op);
    if (!list.is_array())
      kiln::detail::fail<InvalidArgument>(op, modules.string(), " is not a list");
    for (const Json& module : list) {
      const std::string type = module.value("type", std::string{});
      const std::filesystem::path path = dir / module.value("path", std::string{});
      // The class name: sentence_transformers.models.Pooling, or ...modules.pooling.Pooling.
      const std::string_view kind = std::string_view(type).substr(type.rfind('.') + 1);
      if (kind == "Transformer") {
        encoder_dir = path;
      } else if (kind == "Pooling") {
        pooling = read_pooling(op, path / "config.json");
      } else if (kind == "Normalize") {
        normalize = true;
      } else {
        kiln::detail::fail<InvalidArgument>(op, modules.string(), ": module '", type,
                                            "' is not one kiln runs (Transformer, Pooling, "
                                            "Normalize)");
      }
    }
  }
  return SentenceEncoder{.tokenizer = WordPieceTokenizer::from_directory(encoder_dir),
                         .model = nn::BertModel::from_pretrained(encoder_dir, device),
                         .pooling = pooling,
                         .normalize = normalize};
}

Tensor<2> SentenceEncoder::encode(const std::vector<std::string>& texts) const {
  const Device device = model.embeddings.word_embeddings.weight.val().device();
  if (texts.empty()) {
    return Tensor<2>::zeros({0, dimension()}, device,
                            model.embeddings.word_embeddings.weight.val().dtype());
  }
  BatchEncoding batch = tokenizer.encode_batch(texts);
  const Tensor<2, Int> mask =
      int_tensor(std::move(batch.attention_mask), batch.rows, batch.cols, device);
  const Tensor<3> hidden =
      model.forward(int_tensor(std::move(batch.ids), batch.rows, batch.cols, device),
                    {.attention_mask = mask,
                     .token_type_ids = int_tensor(std::move(batch.token_type_ids), batch.rows,
                                                  batch.cols, device),
                     .skip_padding = true});  // pooling reads no padded row
  const Tensor<2> pooled = pool(hidden, mask, pooling);
  if (!normalize) return pooled;
  // F.normalize's: x / max(||x||, 1e-12).
  return pooled / pooled.norm_dim(2.0, 1).clamp_min(1e-12);
}

}  // namespace kiln::text
