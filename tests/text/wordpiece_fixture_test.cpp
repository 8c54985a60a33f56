// kiln's WordPiece tokenizer against Hugging Face's: every text of fixtures/wordpiece_cases.json
// (written by fixtures/make_wordpiece_fixture.py with transformers, tokenizers and
// sentence-transformers) under each variant of options and each way of loading.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "data/temp_files.h"

namespace kiln::text {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<std::int64_t>;

const std::filesystem::path kFixtures =
    std::filesystem::path(KILN_TEST_SOURCE_DIR) / "text/fixtures";

const Json& fixture() {
  static const Json cases = [] {
    std::ifstream in(kFixtures / "wordpiece_cases.json", std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return Json::parse(text.str());
  }();
  return cases;
}

std::vector<std::string> vocab_lines() {
  std::ifstream in(kFixtures / "all-MiniLM-L6-v2/vocab.txt", std::ios::binary);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The names of the vocabulary a variant uses, read here from the files (not the tokenizer).
std::vector<std::string> names_for(const std::string& source) {
  std::vector<std::string> names = vocab_lines();
  if (source.starts_with("small")) {
    const Json& small = fixture()["small_vocab"];
    names.resize(small["first_lines_of_vocab_txt"].get<std::size_t>());
    for (const Json& added : small["added"]) names.push_back(added.get<std::string>());
  }
  return names;
}

WordPieceOptions options_from(const Json& json) {
  WordPieceOptions options;
  if (json.contains("lowercase")) options.lowercase = json["lowercase"];
  if (json.contains("strip_accents")) options.strip_accents = json["strip_accents"].get<bool>();
  if (json.contains("split_chinese_chars"))
    options.split_chinese_chars = json["split_chinese_chars"];
  if (json.contains("max_chars_per_word")) options.max_chars_per_word = json["max_chars_per_word"];
  if (json.contains("clean_text")) options.clean_text = json["clean_text"];
  return options;
}

WordPieceTokenizer load(const Json& variant) {
  const std::string source = variant["source"];
  if (source == "vocab") {
    return WordPieceTokenizer::from_vocab_file(kFixtures / "all-MiniLM-L6-v2/vocab.txt",
                                               options_from(variant["options"]));
  }
  if (source == "small/tokenizer.json") {
    return WordPieceTokenizer::from_tokenizer_json(kFixtures / source);
  }
  return WordPieceTokenizer::from_directory(kFixtures / source);
}

const Json& variant_named(const std::string& name) {
  for (const Json& variant : fixture()["variants"]) {
    if (variant["name"] == name) return variant;
  }
  throw std::runtime_error("no variant " + name);
}

// A variant's expectation for text i: its own entry, else the default variant's.
const Json* expected(const Json& variant, const char* key, std::size_t i) {
  const Json& own = variant[key];
  if (own.is_array()) return &own[i];
  const auto found = own.find(std::to_string(i));
  if (found != own.end()) return &*found;
  const Json& fallback = variant_named("default")[key];
  return fallback.is_array() ? &fallback[i] : nullptr;
}

std::string shown(const std::string& text) { return Json(text).dump(); }

std::string shown(const std::vector<std::string>& tokens) { return Json(tokens).dump(); }

std::string shown(const Ids& ids) { return Json(ids).dump(); }

// Compares one variant over every text; returns the mismatches, each described.
std::vector<std::string> compare(const Json& variant, const WordPieceTokenizer& tokenizer) {
  const Json& texts = fixture()["texts"];
  const std::size_t short_length = fixture()["short_max_length"];
  const std::vector<std::string> names = names_for(variant["source"]);
  const bool has_short = variant.contains("ids_short");
  std::vector<std::string> failures;
  const auto check = [&](std::size_t i, const char* what, const auto& want, const auto& got) {
    if (want == got) return;
    failures.push_back(std::string(what) + " of text " + std::to_string(i) + " " +
                       shown(texts[i].get<std::string>()) + "\n  expected " + shown(want) +
                       "\n  actual   " + shown(got));
  };
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::string text = texts[i];
    const Ids ids = expected(variant, "ids", i)->get<Ids>();
    check(i, "encode", ids, tokenizer.encode(text).ids);
    if (has_short) {
      check(i, "encode(max_length 10)", expected(variant, "ids_short", i)->get<Ids>(),
            tokenizer.encode(text, short_length).ids);
    }
    std::vector<std::string> tokens;
    if (const auto own = variant["tokens"].find(std::to_string(i));
        own != variant["tokens"].end()) {
      tokens = own->get<std::vector<std::string>>();
    } else {  // the vocabulary's names of the ids between [CLS] and [SEP]
      for (std::size_t k = 1; k + 1 < ids.size(); ++k) {
        tokens.push_back(names.at(static_cast<std::size_t>(ids[k])));
      }
    }
    check(i, "tokenize", tokens, tokenizer.tokenize(text));
  }
  return failures;
}

void expect_matches(const Json& variant, const WordPieceTokenizer& tokenizer) {
  const std::vector<std::string> failures = compare(variant, tokenizer);
  std::string report;
  for (std::size_t k = 0; k < failures.size() && k < 10; ++k) report += failures[k] + "\n";
  EXPECT_TRUE(failures.empty()) << failures.size() << " results differ from Hugging Face's ("
                                << variant["name"] << "), the first:\n"
                                << report;
}

class WordPieceFixture : public testing::TestWithParam<std::string> {};

TEST_P(WordPieceFixture, MatchesHuggingFace) {
  const Json& variant = variant_named(GetParam());
  expect_matches(variant, load(variant));
}

INSTANTIATE_TEST_SUITE_P(WordPiece, WordPieceFixture,
                         testing::Values("default", "cased", "lower_keep_accents", "strip_only",
                                         "no_chinese_split", "short_words", "no_clean_text",
                                         "small_json", "small_dir"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(WordPieceFixtureFile, CoversWhatTheTestsNeed) {
  EXPECT_GE(fixture()["texts"].size(), 300u);
  EXPECT_EQ(fixture()["variants"].size(), 9u);
  // Texts longer than both truncation lengths, and the empty one.
  std::size_t truncated = 0;
  for (const Json& ids : variant_named("default")["ids"]) truncated += ids.size() == 512 ? 1 : 0;
  EXPECT_GE(truncated, 1u);
  EXPECT_EQ(fixture()["texts"][0], "");
}

// The small tokenizer.json again, as a vocabulary file plus the options its file sets: both
// loaders must give Hugging Face's results.
TEST(WordPieceFixtureAgreement, VocabFileWithTheJsonOptionsMatchesTokenizerJson) {
  const Json& variant = variant_named("small_json");
  data::testing::TempDir dir;
  std::string vocab;
  for (const std::string& name : names_for("small")) vocab += name + "\n";
  WordPieceOptions options;
  options.lowercase = false;
  options.strip_accents = true;
  options.split_chinese_chars = false;
  options.max_length = 16;
  options.match_special_tokens = false;
  options.added_tokens = {{"[PAD]"},  {"[UNK]"},  {"[CLS]"},        {"[SEP]"},
                          {"[MASK]"}, {"<city>"}, {"Ünïcode", true}};
  const auto from_vocab =
      WordPieceTokenizer::from_vocab_file(dir.write("vocab.txt", vocab), options);
  const auto from_json =
      WordPieceTokenizer::from_tokenizer_json(kFixtures / "small/tokenizer.json");
  EXPECT_EQ(from_json.vocab_size(), from_vocab.vocab_size());
  EXPECT_EQ(from_json.options().max_length, 16u);
  EXPECT_EQ(from_json.options().lowercase, false);
  EXPECT_EQ(from_json.options().strip_accents, std::optional<bool>(true));
  EXPECT_EQ(from_json.options().split_chinese_chars, false);
  expect_matches(variant, from_vocab);
}

// sentence-transformers' batch: padded to the longest, masks, token types, max_seq_length 256.
TEST(WordPieceFixtureBatch, MatchesSentenceTransformers) {
  const Json& batch = fixture()["batch"];
  ASSERT_TRUE(batch.is_object()) << "the fixture was written without the model directory";
  const auto tokenizer = WordPieceTokenizer::from_directory(kFixtures / "all-MiniLM-L6-v2");
  EXPECT_EQ(tokenizer.options().max_length, batch["max_seq_length"].get<std::size_t>());
  const BatchEncoding encoded =
      tokenizer.encode_batch(batch["texts"].get<std::vector<std::string>>());
  const auto flat = [](const Json& rows) {
    Ids out;
    for (const Json& row : rows) {
      for (const Json& v : row) out.push_back(v);
    }
    return out;
  };
  EXPECT_EQ(encoded.rows, static_cast<std::int64_t>(batch["input_ids"].size()));
  EXPECT_EQ(encoded.cols, static_cast<std::int64_t>(batch["input_ids"][0].size()));
  EXPECT_EQ(encoded.ids, flat(batch["input_ids"]));
  EXPECT_EQ(encoded.attention_mask, flat(batch["attention_mask"]));
  EXPECT_EQ(encoded.token_type_ids, flat(batch["token_type_ids"]));
}

}  // namespace
}  // namespace kiln::text
