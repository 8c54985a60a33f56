// tokenizer.json, Hugging Face `tokenizers`' serialised pipeline: the parts a BERT WordPiece
// tokenizer has, each checked, and anything else refused by name.
#include <optional>
#include <vector>

#include "kiln/detail/format.h"
#include "text/files.h"

namespace kiln::text {
namespace detail {
namespace {

using kiln::detail::concat;

// model.vocab's (token, id) pairs, taken out while the file is parsed: kept in the document they
// would be 30,000 insertions into a std::map, the better part of a BERT tokenizer's load.
using VocabEntries = std::vector<std::pair<std::string, Json>>;

// The vocabulary as id -> token, from the model's map and the added tokens (which may extend it).
// Ids are dense (every one below the largest names a token), so a vector indexed by id holds
// them; an id past any the file could fill is never used to size anything.
class VocabBuilder {
 public:
  VocabBuilder(const JsonReader& reader, std::size_t entries) : reader_(reader), limit_(entries) {}

  void add(std::uint64_t id, const std::string& token, bool added) {
    if (id >= limit_) {  // then some id below it names no token: take() says which
      beyond_ = true;
      return;
    }
    if (id >= by_id_.size()) by_id_.resize(static_cast<std::size_t>(id) + 1);
    std::optional<std::string>& slot = by_id_[static_cast<std::size_t>(id)];
    if (!slot) {
      slot = token;
    } else if (!(added && *slot == token)) {
      reader_.fail(concat("tokens '", *slot, "' and '", token, "' have the same id ", id));
    }
  }

  std::vector<std::string> take() {
    std::vector<std::string> vocab;
    vocab.reserve(by_id_.size());
    for (std::optional<std::string>& token : by_id_) {
      if (!token) reader_.fail(concat("no token has id ", vocab.size()));
      vocab.push_back(std::move(*token));
    }
    if (beyond_) reader_.fail(concat("no token has id ", vocab.size()));
    return vocab;
  }

 private:
  const JsonReader& reader_;
  std::size_t limit_;  // the model's and the added tokens' entries together
  std::vector<std::optional<std::string>> by_id_;
  bool beyond_ = false;  // an id at or past limit_ came
};

// The type a component names, or "" for a null component.
std::string type_of(const JsonReader& reader, const Json& root, std::string_view key) {
  const Json* component = reader.find(root, key, "the file");
  if (component == nullptr || component->is_null()) return "";
  return reader.string_at(*component, "type", key);
}

void read_model(const JsonReader& reader, const Json& root, const VocabEntries& entries,
                VocabBuilder& vocab, WordPieceOptions& options) {
  const Json* model = reader.find(root, "model", "the file");
  if (model == nullptr) reader.fail("no \"model\"");
  const std::string type = reader.string_at(*model, "type", "model");
  if (type != "WordPiece") {
    reader.fail(concat("model type '", type, "' is not WordPiece (only BERT-style tokenizers)"));
  }
  // The entries themselves were taken out while parsing (parse_taking_vocab).
  const Json* map = reader.find(*model, "vocab", "model");
  if (map == nullptr || !map->is_object()) reader.fail("model has no \"vocab\" object");
  for (const auto& [token, id] : entries) {
    vocab.add(reader.as_count(id, concat("the id of '", token, "'")), token, false);
  }
  options.unk_token = reader.string_at(*model, "unk_token", "model");
  const std::string prefix = "##";
  options.continuing_prefix =
      reader.string_at(*model, "continuing_subword_prefix", "model", &prefix);
  const std::uint64_t max_chars = 100;
  options.max_chars_per_word =
      reader.count_at(*model, "max_input_chars_per_word", "model", &max_chars);
}

void read_added_tokens(const JsonReader& reader, const Json& root, VocabBuilder& vocab,
                       WordPieceOptions& options) {
  options.match_special_tokens = false;  // `tokenizers` matches exactly the listed tokens
  const Json* added = reader.find(root, "added_tokens", "the file");
  if (added == nullptr || added->is_null()) return;
  if (!added->is_array()) reader.fail("\"added_tokens\" is not an array");
  for (const Json& entry : *added) {
    const std::string content = reader.string_at(entry, "content", "an added token");
    const std::string where = concat("added token '", content, "'");
    if (reader.bool_at(entry, "single_word", where, false)) {
      reader.fail(concat(where, " is single_word, which is not supported"));
    }
    if (content.empty()) reader.fail("an added token is empty");
    vocab.add(reader.count_at(entry, "id", where), content, true);
    // lstrip and rstrip only move white space into the token's span: the pieces are the same.
    options.added_tokens.push_back(
        {.content = content, .normalized = reader.bool_at(entry, "normalized", where, true)});
  }
}

void read_normalizer(const JsonReader& reader, const Json& root, WordPieceOptions& options) {
  const std::string type = type_of(reader, root, "normalizer");
  if (type.empty()) {  // none: the text is used as it is
    options.clean_text = options.split_chinese_chars = options.lowercase = false;
    options.strip_accents = false;
    return;
  }
  if (type != "BertNormalizer") {
    reader.fail(concat("normalizer '", type, "' is not supported (only BertNormalizer)"));
  }
  const Json& normalizer = root.at("normalizer");
  options.clean_text = reader.bool_at(normalizer, "clean_text", "normalizer", true);
  options.split_chinese_chars =
      reader.bool_at(normalizer, "handle_chinese_chars", "normalizer", true);
  options.lowercase = reader.bool_at(normalizer, "lowercase", "normalizer", true);
  const Json* strip = reader.find(normalizer, "strip_accents", "normalizer");
  options.strip_accents.reset();
  if (strip != nullptr && !strip->is_null()) {
    options.strip_accents = reader.bool_at(normalizer, "strip_accents", "normalizer", false);
  }
}

// The token of a processor's ["[CLS]", 101] pair.
std::string pair_token(const JsonReader& reader, const Json& processor, std::string_view key) {
  const Json* pair = reader.find(processor, key, "post_processor");
  if (pair == nullptr || !pair->is_array() || pair->size() != 2 || !(*pair)[0].is_string()) {
    reader.fail(concat("post_processor's \"", key, "\" is not a [token, id] pair"));
  }
  return (*pair)[0].get<std::string>();
}

// TemplateProcessing's single template must be [special, $A, special]: [CLS] $A [SEP].
void read_template(const JsonReader& reader, const Json& processor, WordPieceOptions& options) {
  const Json* single = reader.find(processor, "single", "post_processor");
  const auto special_at = [&](std::size_t index) -> std::string {
    const Json* piece = reader.find((*single)[index], "SpecialToken", "a template piece");
    if (piece == nullptr) return "";
    const std::string name = reader.string_at(*piece, "id", "SpecialToken");
    const Json* specials = reader.find(processor, "special_tokens", "post_processor");
    const Json* special =
        specials == nullptr ? nullptr : reader.find(*specials, name, "special_tokens");
    const Json* tokens = special == nullptr ? nullptr : reader.find(*special, "tokens", name);
    if (tokens == nullptr || !tokens->is_array() || tokens->size() != 1 ||
        !(*tokens)[0].is_string()) {
      reader.fail(concat("post_processor's special token '", name, "' is not one token"));
    }
    return (*tokens)[0].get<std::string>();
  };
  const bool shaped = single != nullptr && single->is_array() && single->size() == 3 &&
                      reader.find((*single)[1], "Sequence", "a template piece") != nullptr;
  std::string cls = shaped ? special_at(0) : "";
  std::string sep = shaped ? special_at(2) : "";
  if (cls.empty() || sep.empty()) {
    reader.fail("post_processor's single template is not [special token, $A, special token]");
  }
  options.cls_token = std::move(cls);
  options.sep_token = std::move(sep);
}

void read_post_processor(const JsonReader& reader, const Json& root, WordPieceOptions& options) {
  const std::string type = type_of(reader, root, "post_processor");
  if (type.empty()) return;  // none: transformers' BertTokenizer adds [CLS] and [SEP] itself
  const Json& processor = root.at("post_processor");
  if (type == "TemplateProcessing") {
    read_template(reader, processor, options);
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    options.cls_token = pair_token(reader, processor, "cls");
    options.sep_token = pair_token(reader, processor, "sep");
  } else {
    reader.fail(
        concat("post_processor '", type,
               "' is not supported (TemplateProcessing, BertProcessing, RobertaProcessing)"));
  }
}

void read_padding_and_truncation(const JsonReader& reader, const Json& root,
                                 WordPieceOptions& options) {
  const Json* padding = reader.find(root, "padding", "the file");
  if (padding != nullptr && !padding->is_null()) {
    options.pad_token = reader.string_at(*padding, "pad_token", "padding", &options.pad_token);
  }
  const Json* truncation = reader.find(root, "truncation", "the file");
  if (truncation != nullptr && !truncation->is_null()) {
    const std::string right = "Right";
    if (reader.string_at(*truncation, "direction", "truncation", &right) != right) {
      reader.fail("truncation direction is not Right (only right truncation is supported)");
    }
    options.max_length = reader.count_at(*truncation, "max_length", "truncation");
  }
}

// model.vocab's entries go to vocab instead of the document.
Json parse_taking_vocab(const std::filesystem::path& path, std::string_view op,
                        VocabEntries& vocab) {
  std::string top_key, model_key, token;
  const auto in_vocab = [&] { return top_key == "model" && model_key == "vocab"; };
  // depth: 1 for the top object's members, 2 for model's, 3 for the vocabulary's. Returning
  // false for a vocabulary entry leaves it out of the document.
  const Json::parser_callback_t take = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::key) {
      if (depth == 1) top_key = parsed.get<std::string>();
      if (depth == 2) model_key = parsed.get<std::string>();
      if (depth == 3 && in_vocab()) {
        token = parsed.get<std::string>();
        return false;
      }
    } else if (event == Json::parse_event_t::value && depth == 3 && in_vocab()) {
      vocab.emplace_back(std::move(token), std::move(parsed));
      return false;
    }
    return true;
  };
  return read_json_file(path, op, take);
}

}  // namespace

TokenizerSpec read_tokenizer_json(const std::filesystem::path& path, std::string_view op) {
  VocabEntries entries_of_vocab;
  const Json root = parse_taking_vocab(path, op, entries_of_vocab);
  const JsonReader reader(op, path.string());
  if (!root.is_object()) reader.fail("not a tokenizer.json (the top level is not an object)");
  const std::string pre_tokenizer = type_of(reader, root, "pre_tokenizer");
  if (pre_tokenizer != "BertPreTokenizer") {
    reader.fail(concat("pre_tokenizer '", pre_tokenizer.empty() ? "null" : pre_tokenizer,
                       "' is not supported (only BertPreTokenizer)"));
  }
  TokenizerSpec spec;
  // Dense ids fit in as many slots as the model's vocabulary and the added tokens have entries.
  std::size_t entries = entries_of_vocab.size();
  if (const auto added = root.find("added_tokens"); added != root.end()) entries += added->size();
  VocabBuilder vocab(reader, entries);
  read_model(reader, root, entries_of_vocab, vocab, spec.options);
  read_added_tokens(reader, root, vocab, spec.options);
  read_normalizer(reader, root, spec.options);
  read_post_processor(reader, root, spec.options);
  read_padding_and_truncation(reader, root, spec.options);
  spec.vocab = vocab.take();
  return spec;
}

}  // namespace detail

WordPieceTokenizer WordPieceTokenizer::from_tokenizer_json(
    const std::filesystem::path& tokenizer_json) {
  constexpr std::string_view kOp = "text::WordPieceTokenizer::from_tokenizer_json";
  return detail::build(detail::read_tokenizer_json(tokenizer_json, kOp), kOp,
                       tokenizer_json.string());
}

WordPieceTokenizer WordPieceTokenizer::from_vocab_file(const std::filesystem::path& vocab_txt,
                                                       WordPieceOptions options) {
  constexpr std::string_view kOp = "text::WordPieceTokenizer::from_vocab_file";
  return detail::build({detail::read_vocab_file(vocab_txt, kOp), std::move(options)}, kOp,
                       vocab_txt.string());
}

}  // namespace kiln::text
