// WordPiece tokenization as BERT models use it, matching Hugging Face's `tokenizers` (the
// BertNormalizer, BertPreTokenizer and WordPiece model that transformers' BertTokenizer and
// sentence-transformers run) token for token:
//
//   auto tokenizer = text::WordPieceTokenizer::from_directory("all-MiniLM-L6-v2");
//   tokenizer.tokenize("Héllo, world!");        // {"hello", ",", "world", "!"}
//   text::Encoding one = tokenizer.encode("Héllo, world!");   // ids {101, 7592, 1010, 2088, 999,
//   102} text::BatchEncoding batch = tokenizer.encode_batch({"a first sentence", "a second"});
//   // batch.ids, batch.attention_mask and batch.token_type_ids are [batch.rows, batch.cols],
//   // row-major, padded to the longest row: the inputs of a BERT encoder.
//
// A text goes through these steps (each as Hugging Face does it):
//  1. Added tokens: the special tokens the vocabulary holds ([PAD], [UNK], [CLS], [SEP], [MASK]
//     as the options name them) and WordPieceOptions::added_tokens are found in the raw text,
//     leftmost first and longest at one place, and become tokens of their own ("x[SEP]y" is
//     x, [SEP], y). The text between them goes through the rest.
//  2. Normalisation (clean_text): NUL, U+FFFD and control characters (Unicode categories Cc, Cf,
//     Co and Cs, but tab, newline and carriage return) are dropped and every White_Space
//     character becomes a space. (split_chinese_chars): CJK ideographs get a space on each side
//     (U+4E00-9FFF, 3400-4DBF, F900-FAFF, 20000-2A6DF, 2A700-2B73F, 2B740-2B81F, 2B920-2CEAF,
//     2F800-2FA1F: the ranges of `tokenizers`, which start one extension at 2B920 where Google's
//     BERT started it at 2B820). (strip_accents) NFD, then nonspacing marks (Mn) are dropped:
//     Hangul syllables become their jamo. (lowercase) every character is lower-cased, after
//     stripping, as `tokenizers` does. (transformers' older Python BertTokenizer, now
//     BertTokenizerLegacy, differs on 2 of the tests' 356 texts: its final sigma, and U+2B820-
//     2B91F; kiln follows `tokenizers`, which sentence-transformers runs.)
//  3. Pre-tokenisation: split on white space (dropped) and on punctuation (ASCII ! to /, : to @,
//     [ to `, { to ~, and the Unicode P* categories; each mark is a word of its own).
//  4. WordPiece: each word is split greedily into the longest vocabulary entry from its start,
//     then the longest "##"-prefixed entry from there on. A word that cannot be split so, or has
//     more than max_chars_per_word code points, becomes [UNK] as a whole.
//  5. encode adds [CLS] and [SEP] after keeping the first max_length - 2 pieces.
//
// Unicode data comes from utf8proc (Unicode 15 in utf8proc 2.8). `tokenizers` lower-cases with
// Rust's (Unicode 16) but takes categories and NFD from crates with tables of about Unicode 8.
// Every code point was run through both (the text a, the character, b, tokenizers 0.23): 624 of
// the 1,112,064 differ under the default options, 149 cased, all of them characters assigned or
// re-categorised since Unicode 8 and none in the tests: 127 punctuation marks (split here, not
// there), 20 format characters (dropped here), 419 nonspacing marks (dropped here when accents
// are stripped), 55 letters of Unicode 16 that Rust lower-cases, and 3 re-categorised characters
// (U+166D, U+1734, U+11938).
// Lower-casing is full lower-casing as Rust's char::to_lowercase does it (U+0130 İ becomes i plus
// U+0307), without Python's context-dependent final sigma (Σ is always σ, as in `tokenizers`).
//
// Errors: every failure is a kiln::Error (InvalidArgument) whose message starts with the
// function, e.g. "[text::WordPieceTokenizer::encode] invalid UTF-8 at byte 3 (0xff)". Texts must
// be UTF-8 (Python's strings cannot hold anything else, so Hugging Face never sees invalid input).
// The tokenizer is immutable after construction: copies share its tables and every member
// function is safe to call from several threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::text {

// A vocabulary entry matched whole in the text before WordPiece (tokenizer.json's added_tokens).
struct AddedToken {
  std::string content;
  // false: matched in the raw text; true: matched in the normalised text, against the
  // normalised content (e.g. lower-cased), as Hugging Face does.
  bool normalized = false;
};

struct WordPieceOptions {
  bool lowercase = true;                // BertTokenizer's do_lower_case
  std::optional<bool> strip_accents{};  // unset: follows lowercase, as Hugging Face does
  bool split_chinese_chars = true;      // tokenize_chinese_chars
  std::string unk_token = "[UNK]", cls_token = "[CLS]", sep_token = "[SEP]", pad_token = "[PAD]";
  std::string continuing_prefix = "##";
  std::size_t max_chars_per_word = 100;
  // model_max_length: the default truncation length, specials included.
  std::size_t max_length = 512;
  // BertNormalizer's clean_text: drop control characters and map white space to spaces.
  bool clean_text = true;
  // Matched in the raw text like the other special tokens when the vocabulary holds it.
  std::string mask_token = "[MASK]";
  // Match unk, cls, sep, pad and mask tokens in the text (transformers' BertTokenizer does;
  // its split_special_tokens=True is false here). from_tokenizer_json turns this off and lists
  // the file's added_tokens instead, as `tokenizers` matches only those.
  bool match_special_tokens = true;
  std::vector<AddedToken> added_tokens{};
};

// One text: [CLS] pieces... [SEP], truncated to max_length.
struct Encoding {
  std::vector<std::int64_t> ids;
  std::vector<std::string> tokens;
};

// Texts padded to the longest (pad id), row-major [rows, cols].
struct BatchEncoding {
  std::int64_t rows = 0, cols = 0;
  // attention_mask: 1 for a real token, 0 for padding; token_type_ids: all 0 (one segment).
  std::vector<std::int64_t> ids, attention_mask, token_type_ids;
};

class WordPieceTokenizer {
 public:
  // vocab[i] is the token of id i. Later duplicates win, as in Hugging Face (vocab_size() still
  // counts every line: the ids a model's embedding table must hold). InvalidArgument if the
  // vocabulary lacks the unk, cls, sep or pad token, or max_length is below 2.
  WordPieceTokenizer(std::vector<std::string> vocab, WordPieceOptions options = {});

  // A vocab.txt: one token a line, the line number its id (trailing white space and \r ignored).
  [[nodiscard]] static WordPieceTokenizer from_vocab_file(const std::filesystem::path& vocab_txt,
                                                          WordPieceOptions options = {});
  // A Hugging Face `tokenizers` file: the BertNormalizer's flags, the WordPiece vocabulary, unk
  // token, continuing prefix and max chars per word, the added tokens, [CLS]/[SEP] from the post
  // processor (TemplateProcessing, BertProcessing or RobertaProcessing; [CLS]/[SEP] when there is
  // none), [PAD] from the padding (its strategy is not used: encode_batch pads to the longest),
  // and max_length from the truncation (512 when the file has none). A normalizer other than
  // BertNormalizer (or none), a pre-tokenizer other than BertPreTokenizer, a model other than
  // WordPiece, left truncation and single_word added tokens are refused (InvalidArgument).
  [[nodiscard]] static WordPieceTokenizer from_tokenizer_json(
      const std::filesystem::path& tokenizer_json);
  // A model directory as Hugging Face writes it, read as AutoTokenizer and sentence-transformers
  // read it: tokenizer.json if present, else vocab.txt; then tokenizer_config.json's
  // do_lower_case / strip_accents / tokenize_chinese_chars / special tokens, which win over
  // tokenizer.json's (for tokenizer_class BertTokenizer, BertTokenizer's defaults stand in for
  // the flags it omits, as transformers' constructor does), and model_max_length; then
  // sentence_bert_config.json's max_seq_length, which wins when present (and its do_lower_case,
  // which lower-cases when true). max_length stays 512 when neither file sets it (transformers
  // would not truncate; BERT's position table holds 512).
  [[nodiscard]] static WordPieceTokenizer from_directory(const std::filesystem::path& dir);

  // Word pieces, no special tokens added, not truncated.
  [[nodiscard]] std::vector<std::string> tokenize(std::string_view utf8) const;
  // [CLS] pieces [SEP], the pieces cut to max_length - 2 (0: options().max_length).
  [[nodiscard]] Encoding encode(std::string_view utf8, std::size_t max_length = 0) const;
  // Each text encoded, padded with the pad id to the longest; token_type_ids are all 0.
  [[nodiscard]] BatchEncoding encode_batch(const std::vector<std::string>& texts,
                                           std::size_t max_length = 0) const;

  // InvalidArgument naming the token if the vocabulary lacks it.
  [[nodiscard]] std::int64_t token_id(std::string_view token) const;
  // The token of an id; InvalidArgument if id is outside [0, vocab_size()).
  [[nodiscard]] const std::string& id_to_token(std::int64_t id) const;
  [[nodiscard]] std::size_t vocab_size() const;
  [[nodiscard]] const WordPieceOptions& options() const;

 private:
  struct State;  // the tables, built once (src/text/wordpiece_tokenizer.cpp)
  std::shared_ptr<const State> state_;
};

}  // namespace kiln::text
