// Loading WordPieceTokenizer from Hugging Face's files: vocab.txt, tokenizer.json (every field
// the loader reads, on a hand-written file with unusual values, and each way a file is refused)
// and model directories (which file wins over which).
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <nlohmann/json.hpp>

#include "data/temp_files.h"
#include "support/error_message.h"

namespace kiln::text {
namespace {

using Ids = std::vector<std::int64_t>;
using Tokens = std::vector<std::string>;
using Json = nlohmann::json;
using data::testing::TempDir;
using test::expect_error;

constexpr const char* kFromVocab = "text::WordPieceTokenizer::from_vocab_file";
constexpr const char* kFromJson = "text::WordPieceTokenizer::from_tokenizer_json";
constexpr const char* kFromDirectory = "text::WordPieceTokenizer::from_directory";

// A RoBERTa-flavoured WordPiece file: other special tokens, prefix "@@", 7 characters a word,
// cased, truncation at 6.
Json unusual_tokenizer_json() {
  return Json::parse(R"({
    "version": "1.0",
    "truncation": {"direction": "Right", "max_length": 6, "strategy": "LongestFirst", "stride": 0},
    "padding": {"strategy": "BatchLongest", "direction": "Right", "pad_to_multiple_of": null,
                "pad_id": 0, "pad_type_id": 0, "pad_token": "<pad>"},
    "added_tokens": [
      {"id": 0, "content": "<pad>", "single_word": false, "lstrip": false, "rstrip": false,
       "normalized": false, "special": true},
      {"id": 11, "content": "<mask>", "single_word": false, "lstrip": true, "rstrip": false,
       "normalized": false, "special": true}],
    "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                   "strip_accents": null, "lowercase": false},
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": {"type": "BertProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1]},
    "decoder": {"type": "WordPiece", "prefix": "@@", "cleanup": true},
    "model": {"type": "WordPiece", "unk_token": "<unk>", "continuing_subword_prefix": "@@",
              "max_input_chars_per_word": 7,
              "vocab": {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "Run": 4, "@@ning": 5,
                        "run": 6, "long": 7, "@@er": 8, "longer": 9, "!": 10}}
  })");
}

std::filesystem::path write_json(const TempDir& dir, const std::string& name, const Json& json) {
  return dir.write(name, json.dump());
}

TEST(WordPieceFiles, ReadsVocabTxtLines) {
  TempDir dir;
  // CRLF endings, trailing spaces and a last line without a line break.
  const auto path =
      dir.write("vocab.txt", "[PAD]\r\n[UNK]  \n[CLS]\n[SEP]\n\xC3\xA9t\xC3\xA9\t\n##s\nwa");
  const auto tokenizer = WordPieceTokenizer::from_vocab_file(path);
  EXPECT_EQ(tokenizer.vocab_size(), 7u);
  EXPECT_EQ(tokenizer.token_id("[PAD]"), 0);
  EXPECT_EQ(tokenizer.token_id("[UNK]"), 1);
  EXPECT_EQ(tokenizer.token_id("\xC3\xA9t\xC3\xA9"), 4);
  EXPECT_EQ(tokenizer.encode("Was").ids, (Ids{2, 6, 5, 3}));
  WordPieceOptions cased;
  cased.lowercase = false;
  EXPECT_EQ(WordPieceTokenizer::from_vocab_file(path, cased).tokenize("\xC3\xA9t\xC3\xA9s"),
            (Tokens{"\xC3\xA9t\xC3\xA9", "##s"}));
}

TEST(WordPieceFiles, RefusesBadVocabFiles) {
  TempDir dir;
  expect_error<InvalidArgument>(
      [&] { (void)WordPieceTokenizer::from_vocab_file(dir.path() / "none.txt"); }, kFromVocab,
      {"none.txt", "no such file"});
  expect_error<InvalidArgument>([&] { (void)WordPieceTokenizer::from_vocab_file(dir.path()); },
                                kFromVocab, {"not a regular file"});
  const auto bad = dir.write("bad.txt", "[PAD]\n[UNK]\nx\xFFy\n");
  expect_error<InvalidArgument>([&] { (void)WordPieceTokenizer::from_vocab_file(bad); }, kFromVocab,
                                {"bad.txt", "line 3 is not UTF-8"});
  const auto no_cls = dir.write("no_cls.txt", "[PAD]\n[UNK]\n[SEP]\n");
  expect_error<InvalidArgument>([&] { (void)WordPieceTokenizer::from_vocab_file(no_cls); },
                                kFromVocab, {"no_cls.txt", "cls token '[CLS]'"});
}

TEST(WordPieceFiles, ReadsEveryFieldOfTokenizerJson) {
  TempDir dir;
  const auto tokenizer = WordPieceTokenizer::from_tokenizer_json(
      write_json(dir, "tokenizer.json", unusual_tokenizer_json()));
  const WordPieceOptions& options = tokenizer.options();
  EXPECT_FALSE(options.lowercase);
  EXPECT_FALSE(options.strip_accents.has_value());
  EXPECT_TRUE(options.clean_text && options.split_chinese_chars);
  EXPECT_EQ(options.unk_token, "<unk>");
  EXPECT_EQ(options.cls_token, "<s>");
  EXPECT_EQ(options.sep_token, "</s>");
  EXPECT_EQ(options.pad_token, "<pad>");
  EXPECT_EQ(options.continuing_prefix, "@@");
  EXPECT_EQ(options.max_chars_per_word, 7u);
  EXPECT_EQ(options.max_length, 6u);
  EXPECT_EQ(tokenizer.vocab_size(), 12u);  // the added <mask> extends the model's vocabulary

  // Cased "Running" is Run @@ning; "longerer" has 8 characters (> 7): <unk>.
  EXPECT_EQ(tokenizer.tokenize("Running longerer!"), (Tokens{"Run", "@@ning", "<unk>", "!"}));
  EXPECT_EQ(tokenizer.tokenize("longer"), Tokens{"longer"});
  EXPECT_EQ(tokenizer.tokenize("run<mask>long"), (Tokens{"run", "<mask>", "long"}));
  EXPECT_EQ(tokenizer.encode("Running longerer! run").ids, (Ids{1, 4, 5, 3, 10, 2}));
  EXPECT_EQ(tokenizer.encode_batch({"run", "Running"}).ids, (Ids{1, 6, 2, 0, 1, 4, 5, 2}));
}

TEST(WordPieceFiles, ReadsTemplateProcessingAndNullComponents) {
  TempDir dir;
  Json json = unusual_tokenizer_json();
  json["post_processor"] = Json::parse(R"({"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "</s>", "type_id": 0}}],
    "pair": [],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                       "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}})");
  json["normalizer"] = nullptr;  // no normaliser: nothing is cleaned or lower-cased
  json["truncation"] = nullptr;
  const auto tokenizer = WordPieceTokenizer::from_tokenizer_json(write_json(dir, "t.json", json));
  EXPECT_EQ(tokenizer.options().cls_token, "<s>");
  EXPECT_EQ(tokenizer.options().max_length, 512u);
  EXPECT_FALSE(tokenizer.options().clean_text || tokenizer.options().split_chinese_chars);
  EXPECT_EQ(tokenizer.tokenize("Run\x01!"), (Tokens{"<unk>", "!"}));  // the control char stays
}

TEST(WordPieceFiles, RefusesMalformedTokenizerJson) {
  TempDir dir;
  const auto refused = [&](const std::string& file_text, const std::vector<std::string>& parts) {
    const auto path = dir.write("tokenizer.json", file_text);
    expect_error<InvalidArgument>([&] { (void)WordPieceTokenizer::from_tokenizer_json(path); },
                                  kFromJson, parts);
  };
  const auto modified = [&](const std::function<void(Json&)>& change,
                            const std::vector<std::string>& parts) {
    Json json = unusual_tokenizer_json();
    change(json);
    refused(json.dump(), parts);
  };
  expect_error<InvalidArgument>(
      [&] { (void)WordPieceTokenizer::from_tokenizer_json(dir.path() / "missing.json"); },
      kFromJson, {"missing.json", "no such file"});
  refused("{\"model\": ", {"tokenizer.json", "not JSON"});
  refused("[1, 2]", {"top level is not an object"});
  modified([](Json& j) { j["model"]["type"] = "BPE"; }, {"model type 'BPE' is not WordPiece"});
  modified([](Json& j) { j.erase("model"); }, {"no \"model\""});
  modified([](Json& j) { j["model"]["vocab"]["Run"] = "4"; }, {"the id of 'Run'", "\"4\""});
  modified([](Json& j) { j["model"]["vocab"]["Run"] = 40; }, {"no token has id 4"});
  modified([](Json& j) { j["model"]["vocab"]["Run"] = 5; }, {"'@@ning' and 'Run'", "id 5"});
  modified([](Json& j) { j["model"].erase("unk_token"); }, {"model has no \"unk_token\""});
  modified([](Json& j) { j["model"]["unk_token"] = "[UNK]"; }, {"unk token '[UNK]'"});
  modified([](Json& j) { j["normalizer"] = {{"type", "NFC"}}; }, {"normalizer 'NFC'"});
  modified([](Json& j) { j["normalizer"]["lowercase"] = 1; },
           {"\"lowercase\" is not true or false"});
  modified(
      [](Json& j) {
        j["pre_tokenizer"] = {{"type", "Whitespace"}};
      },
      {"pre_tokenizer 'Whitespace'"});
  modified([](Json& j) { j["pre_tokenizer"] = nullptr; }, {"pre_tokenizer 'null'"});
  modified(
      [](Json& j) {
        j["post_processor"] = {{"type", "ByteLevel"}};
      },
      {"post_processor 'ByteLevel'"});
  modified([](Json& j) { j["post_processor"]["cls"] = "<s>"; },
           {"\"cls\" is not a [token, id] pair"});
  modified(
      [](Json& j) {
        j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", Json::array()}};
      },
      {"single template"});
  modified([](Json& j) { j["truncation"]["direction"] = "Left"; }, {"truncation direction"});
  modified([](Json& j) { j["added_tokens"][1]["single_word"] = true; },
           {"'<mask>' is single_word"});
  modified([](Json& j) { j["added_tokens"][1]["id"] = 4; }, {"'Run' and '<mask>'"});
}

// A model directory: vocab.txt and the two config files.
class WordPieceModelDirectory : public testing::Test {
 protected:
  WordPieceModelDirectory() {
    dir_.write("vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nH\xC3\xA9llo\n<unk>\n");
  }
  std::vector<std::string> pieces() const {
    return WordPieceTokenizer::from_directory(dir_.path()).tokenize("H\xC3\xA9llo");
  }
  TempDir dir_;
};

TEST_F(WordPieceModelDirectory, UsesVocabTxtWithBertDefaults) {
  const auto tokenizer = WordPieceTokenizer::from_directory(dir_.path());
  EXPECT_EQ(tokenizer.options().max_length, 512u);
  EXPECT_EQ(pieces(), Tokens{"hello"});
}

TEST_F(WordPieceModelDirectory, TokenizerConfigSetsFlagsSpecialsAndLength) {
  dir_.write(
      "tokenizer_config.json",
      R"({"do_lower_case": false, "model_max_length": 128, "tokenizer_class": "BertTokenizer",
                 "unk_token": {"__type": "AddedToken", "content": "<unk>", "lstrip": false}})");
  const auto tokenizer = WordPieceTokenizer::from_directory(dir_.path());
  EXPECT_EQ(pieces(), Tokens{"H\xC3\xA9llo"});
  EXPECT_EQ(tokenizer.options().max_length, 128u);
  EXPECT_EQ(tokenizer.options().unk_token, "<unk>");
  EXPECT_EQ(tokenizer.tokenize("x"), Tokens{"<unk>"});
  // transformers' "no limit" leaves the default.
  dir_.write("tokenizer_config.json", R"({"model_max_length": 1000000000000000019884624838656})");
  EXPECT_EQ(WordPieceTokenizer::from_directory(dir_.path()).options().max_length, 512u);
}

TEST_F(WordPieceModelDirectory, SentenceBertConfigLengthWins) {
  dir_.write("tokenizer_config.json", R"({"model_max_length": 128})");
  dir_.write("sentence_bert_config.json", R"({"max_seq_length": 64, "do_lower_case": false})");
  EXPECT_EQ(WordPieceTokenizer::from_directory(dir_.path()).options().max_length, 64u);
}

TEST_F(WordPieceModelDirectory, TokenizerConfigOverridesTokenizerJson) {
  TempDir json_dir;
  Json json = unusual_tokenizer_json();
  json["normalizer"]["lowercase"] = false;
  write_json(json_dir, "tokenizer.json", json);
  // No tokenizer_config.json: the file's flags, its added tokens, no truncation of its own.
  auto tokenizer = WordPieceTokenizer::from_directory(json_dir.path());
  EXPECT_EQ(tokenizer.tokenize("Run"), Tokens{"Run"});
  EXPECT_EQ(tokenizer.options().max_length, 512u);
  // A BERT class's defaults replace the flags the config omits (lowercase), as in transformers.
  json_dir.write("tokenizer_config.json",
                 R"({"tokenizer_class": "BertTokenizer", "unk_token": "<unk>", "pad_token": "<pad>",
                     "cls_token": "<s>", "sep_token": "</s>"})");
  EXPECT_EQ(WordPieceTokenizer::from_directory(json_dir.path()).tokenize("Run"), Tokens{"run"});
  // Another class keeps the file's flags.
  json_dir.write("tokenizer_config.json", R"({"tokenizer_class": "PreTrainedTokenizerFast"})");
  EXPECT_EQ(WordPieceTokenizer::from_directory(json_dir.path()).tokenize("Run"), Tokens{"Run"});
}

TEST_F(WordPieceModelDirectory, RefusesWhatItCannotRead) {
  TempDir empty;
  expect_error<InvalidArgument>([&] { (void)WordPieceTokenizer::from_directory(empty.path()); },
                                kFromDirectory, {"neither tokenizer.json nor vocab.txt"});
  expect_error<InvalidArgument>(
      [&] { (void)WordPieceTokenizer::from_directory(dir_.path() / "vocab.txt"); }, kFromDirectory,
      {"not a directory"});
  dir_.write("tokenizer_config.json", "{not json");
  expect_error<InvalidArgument>([&] { (void)WordPieceTokenizer::from_directory(dir_.path()); },
                                kFromDirectory, {"tokenizer_config.json", "not JSON"});
  dir_.write("tokenizer_config.json", R"({"do_lower_case": "yes"})");
  expect_error<InvalidArgument>([&] { (void)WordPieceTokenizer::from_directory(dir_.path()); },
                                kFromDirectory, {"\"do_lower_case\" is not true or false"});
  dir_.write("tokenizer_config.json", R"({"cls_token": "<cls>"})");
  expect_error<InvalidArgument>([&] { (void)WordPieceTokenizer::from_directory(dir_.path()); },
                                kFromDirectory, {"cls token '<cls>'"});
  dir_.write("tokenizer_config.json", "{}");
  dir_.write("sentence_bert_config.json", R"({"max_seq_length": -3})");
  expect_error<InvalidArgument>([&] { (void)WordPieceTokenizer::from_directory(dir_.path()); },
                                kFromDirectory, {"sentence_bert_config.json", "max_seq_length"});
}

}  // namespace
}  // namespace kiln::text
