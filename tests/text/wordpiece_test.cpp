// WordPieceTokenizer over small hand-made vocabularies: the WordPiece rule (Google BERT's own
// example), encode and its truncation, encode_batch's padding and masks, the options, special
// and added tokens, and the errors.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <thread>

#include "support/error_message.h"

namespace kiln::text {
namespace {

using Ids = std::vector<std::int64_t>;
using Tokens = std::vector<std::string>;
using test::expect_error;

// Google BERT's tokenization_test vocabulary, after the special tokens.
std::vector<std::string> bert_vocab() {
  return {"[PAD]", "[UNK]", "[CLS]",  "[SEP]", "[MASK]", "want", "##want",
          "##ed",  "wa",    "un",     "runn",  "##ing",  ",",    "[",
          "]",     "cls",   "<city>", "héllo", "Héllo",  "hello"};
}
// Ids of the vocabulary above.
// clang-format off
enum : std::int64_t {
  kPad, kUnk, kCls, kSep, kMask, kWant, kHashWant, kHashEd, kWa, kUn,
  kRunn, kHashIng, kComma, kOpen, kClose, kClsWord, kCity, kAccented, kCapitalAccented, kHello
};
// clang-format on

TEST(WordPieceTokenizer, SplitsGreedilyLongestFirst) {
  const WordPieceTokenizer tokenizer(bert_vocab());
  EXPECT_EQ(tokenizer.tokenize("UNwant\u00E9d,running"),
            (Tokens{"un", "##want", "##ed", ",", "runn", "##ing"}));
  // A word with a piece the vocabulary lacks is [UNK] as a whole.
  EXPECT_EQ(tokenizer.tokenize("unwantedX running"), (Tokens{"[UNK]", "runn", "##ing"}));
  EXPECT_EQ(tokenizer.tokenize(""), Tokens{});
  EXPECT_EQ(tokenizer.tokenize(" \t\n "), Tokens{});
}

TEST(WordPieceTokenizer, EncodeAddsClsAndSepAndTruncates) {
  const WordPieceTokenizer tokenizer(bert_vocab());
  const Encoding full = tokenizer.encode("unwanted running");
  EXPECT_EQ(full.ids, (Ids{kCls, kUn, kHashWant, kHashEd, kRunn, kHashIng, kSep}));
  EXPECT_EQ(full.tokens, (Tokens{"[CLS]", "un", "##want", "##ed", "runn", "##ing", "[SEP]"}));
  EXPECT_EQ(tokenizer.encode("unwanted running", 4).ids, (Ids{kCls, kUn, kHashWant, kSep}));
  EXPECT_EQ(tokenizer.encode("unwanted running", 4).tokens,
            (Tokens{"[CLS]", "un", "##want", "[SEP]"}));
  EXPECT_EQ(tokenizer.encode("unwanted running", 2).ids, (Ids{kCls, kSep}));
  EXPECT_EQ(tokenizer.encode("").ids, (Ids{kCls, kSep}));

  WordPieceOptions options;
  options.max_length = 3;  // the default when encode is given 0
  const WordPieceTokenizer short_tokenizer(bert_vocab(), options);
  EXPECT_EQ(short_tokenizer.encode("unwanted running").ids, (Ids{kCls, kUn, kSep}));
  EXPECT_EQ(short_tokenizer.encode("unwanted running", 0).ids, (Ids{kCls, kUn, kSep}));
  EXPECT_EQ(short_tokenizer.encode("unwanted running", 5).ids,
            (Ids{kCls, kUn, kHashWant, kHashEd, kSep}));
  expect_error<InvalidArgument>([&] { (void)tokenizer.encode("un", 1); },
                                "text::WordPieceTokenizer::encode", {"max_length 1"});
}

TEST(WordPieceTokenizer, EncodeBatchPadsToTheLongestWithMasks) {
  const WordPieceTokenizer tokenizer(bert_vocab());
  const BatchEncoding batch = tokenizer.encode_batch({"running", "unwanted running", ""});
  EXPECT_EQ(batch.rows, 3);
  EXPECT_EQ(batch.cols, 7);
  EXPECT_EQ(batch.ids, (Ids{kCls, kRunn, kHashIng,  kSep,    kPad,  kPad,     kPad,  //
                            kCls, kUn,   kHashWant, kHashEd, kRunn, kHashIng, kSep,  //
                            kCls, kSep,  kPad,      kPad,    kPad,  kPad,     kPad}));
  EXPECT_EQ(batch.attention_mask, (Ids{1, 1, 1, 1, 0, 0, 0,  //
                                       1, 1, 1, 1, 1, 1, 1,  //
                                       1, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(batch.token_type_ids, Ids(21, 0));

  const BatchEncoding cut = tokenizer.encode_batch({"unwanted running", "wa"}, 3);
  EXPECT_EQ(cut.rows, 2);
  EXPECT_EQ(cut.cols, 3);
  EXPECT_EQ(cut.ids, (Ids{kCls, kUn, kSep, kCls, kWa, kSep}));
  EXPECT_EQ(cut.attention_mask, Ids(6, 1));

  const BatchEncoding none = tokenizer.encode_batch({});
  EXPECT_EQ(none.rows, 0);
  EXPECT_EQ(none.cols, 0);
  EXPECT_TRUE(none.ids.empty() && none.attention_mask.empty() && none.token_type_ids.empty());
  expect_error<InvalidArgument>([&] { (void)tokenizer.encode_batch({"a"}, 1); },
                                "text::WordPieceTokenizer::encode_batch", {"max_length 1"});
}

TEST(WordPieceTokenizer, OptionsChooseCaseAndAccents) {
  const auto pieces = [](WordPieceOptions options) {
    return WordPieceTokenizer(bert_vocab(), std::move(options)).tokenize("H\u00E9llo");
  };
  EXPECT_EQ(pieces({}), Tokens{"hello"});                         // lower-cased, accent stripped
  EXPECT_EQ(pieces({.lowercase = false}), Tokens{"H\u00E9llo"});  // case and accent kept
  EXPECT_EQ(pieces({.lowercase = true, .strip_accents = false}), Tokens{"h\u00E9llo"});
  EXPECT_EQ(pieces({.lowercase = false, .strip_accents = true}), Tokens{"[UNK]"});  // "Hello"
  // A decomposed accent is the same text once normalised.
  EXPECT_EQ(pieces({}), WordPieceTokenizer(bert_vocab()).tokenize("He\u0301llo"));
}

TEST(WordPieceTokenizer, MatchesSpecialAndAddedTokensInTheRawText) {
  const WordPieceTokenizer tokenizer(bert_vocab());
  EXPECT_EQ(tokenizer.tokenize("wa[SEP]un [MASK]"), (Tokens{"wa", "[SEP]", "un", "[MASK]"}));
  EXPECT_EQ(tokenizer.encode("[CLS]").ids, (Ids{kCls, kCls, kSep}));
  // Lower case is not the special token: it is split as text.
  EXPECT_EQ(tokenizer.tokenize("[cls]"), (Tokens{"[", "cls", "]"}));
  EXPECT_EQ(tokenizer.tokenize("<city>"), (Tokens{"[UNK]", "[UNK]", "[UNK]"}));

  WordPieceOptions plain;
  plain.match_special_tokens = false;
  plain.added_tokens = {{"<city>"}};
  const WordPieceTokenizer added(bert_vocab(), plain);
  EXPECT_EQ(added.tokenize("[CLS]wa<city>un"), (Tokens{"[", "cls", "]", "wa", "<city>", "un"}));

  WordPieceOptions normalized;
  normalized.added_tokens = {{"H\u00E9llo", true}};  // matched as it normalises: "hello"
  EXPECT_EQ(WordPieceTokenizer(bert_vocab(), normalized).encode("unHELLOwa").ids,
            (Ids{kCls, kUn, kCapitalAccented, kWa, kSep}));
  EXPECT_EQ(WordPieceTokenizer(bert_vocab(), normalized).tokenize("unHELLOwa"),
            (Tokens{"un", "hello", "wa"}));
}

TEST(WordPieceTokenizer, LooksUpTokensAndIds) {
  const WordPieceTokenizer tokenizer(bert_vocab());
  EXPECT_EQ(tokenizer.vocab_size(), bert_vocab().size());
  EXPECT_EQ(tokenizer.token_id("##want"), kHashWant);
  EXPECT_EQ(tokenizer.id_to_token(kRunn), "runn");
  expect_error<InvalidArgument>([&] { (void)tokenizer.token_id("wanted"); },
                                "text::WordPieceTokenizer::token_id", {"'wanted'", "20 tokens"});
  expect_error<InvalidArgument>([&] { (void)tokenizer.id_to_token(20); },
                                "text::WordPieceTokenizer::id_to_token", {"id 20", "[0, 20)"});
  expect_error<InvalidArgument>([&] { (void)tokenizer.id_to_token(-1); },
                                "text::WordPieceTokenizer::id_to_token", {"id -1"});
  // A repeated entry: the later id wins, as in Hugging Face; every line still counts.
  const WordPieceTokenizer repeated({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "x", "x"});
  EXPECT_EQ(repeated.token_id("x"), 5);
  EXPECT_EQ(repeated.vocab_size(), 6u);
}

TEST(WordPieceTokenizer, NamesTheMissingSpecialToken) {
  const auto without = [](std::string_view token) {
    std::vector<std::string> vocab = bert_vocab();
    std::erase(vocab, std::string(token));
    return vocab;
  };
  expect_error<InvalidArgument>([&] { WordPieceTokenizer tokenizer(without("[UNK]")); },
                                "text::WordPieceTokenizer", {"unk token '[UNK]'"});
  expect_error<InvalidArgument>([&] { WordPieceTokenizer tokenizer(without("[CLS]")); },
                                "text::WordPieceTokenizer", {"cls token '[CLS]'"});
  expect_error<InvalidArgument>([&] { WordPieceTokenizer tokenizer(without("[SEP]")); },
                                "text::WordPieceTokenizer", {"sep token '[SEP]'"});
  expect_error<InvalidArgument>([&] { WordPieceTokenizer tokenizer(without("[PAD]")); },
                                "text::WordPieceTokenizer", {"pad token '[PAD]'"});
  expect_error<InvalidArgument>([&] { WordPieceTokenizer tokenizer({}); },
                                "text::WordPieceTokenizer", {"unk token"});
  // The mask token is optional.
  EXPECT_NO_THROW(WordPieceTokenizer tokenizer(without("[MASK]")));
  expect_error<InvalidArgument>(
      [&] { WordPieceTokenizer tokenizer(bert_vocab(), {.unk_token = "<unk>"}); },
      "text::WordPieceTokenizer", {"'<unk>'"});
  WordPieceOptions added;
  added.added_tokens = {{"<town>"}};
  expect_error<InvalidArgument>([&] { WordPieceTokenizer tokenizer(bert_vocab(), added); },
                                "text::WordPieceTokenizer", {"'<town>'"});
  WordPieceOptions short_length;
  short_length.max_length = 1;
  expect_error<InvalidArgument>([&] { WordPieceTokenizer tokenizer(bert_vocab(), short_length); },
                                "text::WordPieceTokenizer", {"max_length 1"});
}

TEST(WordPieceTokenizer, RefusesInvalidUtf8NamingTheByte) {
  const WordPieceTokenizer tokenizer(bert_vocab());
  const auto expect_bad = [&](const std::string& text, const std::string& where) {
    expect_error<InvalidArgument>([&] { (void)tokenizer.encode(text); },
                                  "text::WordPieceTokenizer::encode", {"invalid UTF-8", where});
  };
  expect_bad("un\xFFwa", "at byte 2 (0xff)");
  expect_bad("wa \xC3", "at byte 3 (0xc3)");                 // cut short
  expect_bad("\xC0\x80", "at byte 0 (0xc0)");                // overlong NUL
  expect_bad("x\xED\xA0\x80", "at byte 1 (0xed)");           // a surrogate
  expect_bad("\xF4\x90\x80\x80", "at byte 0 (0xf4)");        // past U+10FFFF
  expect_bad("unwanted running \x80", "at byte 17 (0x80)");  // past the truncation, still checked
  expect_error<InvalidArgument>([&] { (void)tokenizer.tokenize("\xFE"); },
                                "text::WordPieceTokenizer::tokenize", {"at byte 0"});
  expect_error<InvalidArgument>(
      [&] {
        (void)tokenizer.encode_batch({"wa", "\x80"});
      },
      "text::WordPieceTokenizer::encode_batch", {"at byte 0"});
  EXPECT_THROW((void)tokenizer.encode("\xFF"), Error);  // a kiln::Error
}

TEST(WordPieceTokenizer, CopiesShareTablesAcrossThreads) {
  std::optional<WordPieceTokenizer> original(std::in_place, bert_vocab());
  const WordPieceTokenizer copy = *original;
  original.reset();
  std::vector<std::thread> threads;
  std::vector<Ids> results(4);
  for (std::size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) results[t] = copy.encode("unwanted, running").ids;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const Ids& ids : results) {
    EXPECT_EQ(ids, (Ids{kCls, kUn, kHashWant, kHashEd, kComma, kRunn, kHashIng, kSep}));
  }
}

}  // namespace
}  // namespace kiln::text
