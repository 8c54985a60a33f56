// A model directory as transformers and sentence-transformers read it: tokenizer.json or
// vocab.txt, overridden by tokenizer_config.json, then by sentence_bert_config.json.
#include "kiln/detail/format.h"
#include "kiln/error.h"
#include "text/files.h"

namespace kiln::text {
namespace {

using detail::Json;
using detail::JsonReader;
using kiln::detail::concat;

constexpr std::string_view kOp = "text::WordPieceTokenizer::from_directory";

// transformers writes int(1e30) as model_max_length for "no limit".
constexpr std::uint64_t kNoLimit = std::uint64_t{1} << 40;

// A special token: a string, or an AddedToken object with its "content".
void read_special(const JsonReader& reader, const Json& config, std::string_view key,
                  std::string& token) {
  const Json* value = reader.find(config, key, "the file");
  if (value == nullptr || value->is_null()) return;
  token = value->is_object() ? reader.string_at(*value, "content", key)
                             : reader.string_at(config, key, "the file");
}

// tokenizer_config.json: flags (BertTokenizer's defaults where a BERT tokenizer class omits
// them, as its constructor's defaults then override tokenizer.json's), specials, max length.
void apply_tokenizer_config(const std::filesystem::path& path, WordPieceOptions& options) {
  const Json config = detail::read_json_file(path, kOp);
  const JsonReader reader(kOp, path.string());
  const Json* type = reader.find(config, "tokenizer_class", "the file");
  const bool bert = type == nullptr || type->is_null() || *type == "BertTokenizer" ||
                    *type == "BertTokenizerFast";
  const WordPieceOptions defaults;
  options.lowercase = reader.bool_at(config, "do_lower_case", "the file",
                                     bert ? defaults.lowercase : options.lowercase);
  options.split_chinese_chars =
      reader.bool_at(config, "tokenize_chinese_chars", "the file",
                     bert ? defaults.split_chinese_chars : options.split_chinese_chars);
  if (const Json* strip = reader.find(config, "strip_accents", "the file"); strip != nullptr) {
    options.strip_accents.reset();
    if (!strip->is_null())
      options.strip_accents = reader.bool_at(config, "strip_accents", "the file", false);
  } else if (bert) {
    options.strip_accents.reset();
  }
  read_special(reader, config, "unk_token", options.unk_token);
  read_special(reader, config, "cls_token", options.cls_token);
  read_special(reader, config, "sep_token", options.sep_token);
  read_special(reader, config, "pad_token", options.pad_token);
  read_special(reader, config, "mask_token", options.mask_token);
  const Json* limit = reader.find(config, "model_max_length", "the file");
  if (limit != nullptr && !limit->is_null()) {
    if (limit->is_number_float() && limit->get<double>() >= static_cast<double>(kNoLimit)) return;
    const std::uint64_t length = reader.as_count(*limit, "\"model_max_length\"");
    if (length < kNoLimit) options.max_length = length;
  }
}

// sentence_bert_config.json: max_seq_length wins; do_lower_case true lower-cases the text.
void apply_sentence_bert_config(const std::filesystem::path& path, WordPieceOptions& options) {
  const Json config = detail::read_json_file(path, kOp);
  const JsonReader reader(kOp, path.string());
  const Json* length = reader.find(config, "max_seq_length", "the file");
  if (length != nullptr && !length->is_null()) {
    options.max_length = reader.as_count(*length, "\"max_seq_length\"");
  }
  if (reader.bool_at(config, "do_lower_case", "the file", false)) options.lowercase = true;
}

}  // namespace

WordPieceTokenizer WordPieceTokenizer::from_directory(const std::filesystem::path& dir) {
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    kiln::detail::fail<InvalidArgument>(kOp, dir.string(), ": not a directory");
  }
  detail::TokenizerSpec spec;
  if (std::filesystem::exists(dir / "tokenizer.json", error)) {
    spec = detail::read_tokenizer_json(dir / "tokenizer.json", kOp);
    // transformers sets its own truncation per call and registers the special tokens.
    spec.options.max_length = WordPieceOptions{}.max_length;
    spec.options.match_special_tokens = true;
  } else if (std::filesystem::exists(dir / "vocab.txt", error)) {
    spec.vocab = detail::read_vocab_file(dir / "vocab.txt", kOp);
  } else {
    kiln::detail::fail<InvalidArgument>(kOp, dir.string(),
                                        ": has neither tokenizer.json nor vocab.txt");
  }
  if (std::filesystem::exists(dir / "tokenizer_config.json", error)) {
    apply_tokenizer_config(dir / "tokenizer_config.json", spec.options);
  }
  if (std::filesystem::exists(dir / "sentence_bert_config.json", error)) {
    apply_sentence_bert_config(dir / "sentence_bert_config.json", spec.options);
  }
  return detail::build(std::move(spec), kOp, dir.string());
}

}  // namespace kiln::text
