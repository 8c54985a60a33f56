// Reading Hugging Face's tokenizer files: what the three loaders of WordPieceTokenizer share.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/text/wordpiece.h"

namespace kiln::text::detail {

using Json = nlohmann::json;

// What a tokenizer is built from, before the constructor checks it.
struct TokenizerSpec {
  std::vector<std::string> vocab;
  WordPieceOptions options;
};

// The whole file; InvalidArgument "[op] path: cannot read: ..." if it cannot be read.
std::string read_file(const std::filesystem::path& path, std::string_view op);
// vocab.txt's lines, each without its line break and trailing white space.
std::vector<std::string> read_vocab_file(const std::filesystem::path& path, std::string_view op);
// A JSON file; InvalidArgument naming the file and the parser's complaint if it is not JSON.
// callback, when given, sees every parse event and may leave values out of the document.
Json read_json_file(const std::filesystem::path& path, std::string_view op,
                    const Json::parser_callback_t& callback = nullptr);
// tokenizer.json's model, normaliser, added tokens, specials and truncation.
TokenizerSpec read_tokenizer_json(const std::filesystem::path& path, std::string_view op);

// The tokenizer spec describes; the constructor's complaints (a missing special token, ...)
// rethrown as "[op] origin: complaint".
WordPieceTokenizer build(TokenizerSpec spec, std::string_view op, std::string_view origin);

// Checked access to a JSON file's values; every failure names the file and the key.
class JsonReader {
 public:
  JsonReader(std::string_view op, std::string origin) : op_(op), origin_(std::move(origin)) {}

  [[noreturn]] void fail(std::string_view what) const;
  // object[key], or nullptr when absent; object must be an object (where names it).
  const Json* find(const Json& object, std::string_view key, std::string_view where) const;
  // The value at key, of the wanted kind; fallback when absent or (for optional values) null.
  std::string string_at(const Json& object, std::string_view key, std::string_view where,
                        const std::string* fallback = nullptr) const;
  bool bool_at(const Json& object, std::string_view key, std::string_view where,
               bool fallback) const;
  std::uint64_t count_at(const Json& object, std::string_view key, std::string_view where,
                         const std::uint64_t* fallback = nullptr) const;
  // An integer >= 0 (what is named in messages as where).
  std::uint64_t as_count(const Json& value, std::string_view where) const;
  const std::string& origin() const { return origin_; }

 private:
  std::string_view op_;
  std::string origin_;
};

}  // namespace kiln::text::detail
