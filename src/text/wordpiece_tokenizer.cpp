// WordPieceTokenizer: the tables built once, and the text pipeline run over them (added tokens,
// normalisation, words, pieces).
#include <limits>

#include "kiln/detail/format.h"
#include "kiln/error.h"
#include "kiln/text/wordpiece.h"
#include "text/normalizer.h"
#include "text/token_matcher.h"
#include "text/unicode.h"
#include "text/wordpiece_model.h"

namespace kiln::text {

using kiln::detail::fail;

struct WordPieceTokenizer::State {
  WordPieceOptions options;
  std::vector<std::string> vocab;
  detail::VocabIndex index;
  detail::NormalizerFlags normalizer;
  detail::WordPieceModel model;
  std::int64_t cls_id = 0, sep_id = 0, pad_id = 0;
  detail::TokenMatcher<char> raw_tokens;             // matched in the text as given
  detail::TokenMatcher<char32_t> normalized_tokens;  // matched in the normalised text

  std::int64_t required_id(std::string_view role, const std::string& token) const {
    const auto found = index.find(token);
    if (found == index.end()) {
      fail<InvalidArgument>("text::WordPieceTokenizer", "the vocabulary (", vocab.size(),
                            " tokens) has no ", role, " token '", token, "'");
    }
    return found->second;
  }

  // The first `limit` pieces of text.
  void run(std::string_view text, std::size_t limit, std::string_view op,
           detail::Pieces& out) const;

 private:
  void run_segment(std::string_view raw, std::size_t limit, detail::Pieces& out) const;
  void run_words(std::u32string_view normalized, std::size_t limit, detail::Pieces& out) const;
};

namespace {

std::size_t resolve_max_length(std::size_t requested, const WordPieceOptions& options,
                               std::string_view op) {
  const std::size_t max_length = requested == 0 ? options.max_length : requested;
  if (max_length < 2) {
    fail<InvalidArgument>(op, "max_length ", max_length,
                          " leaves no room for the [CLS] and [SEP] tokens (at least 2)");
  }
  return max_length;
}

}  // namespace

void WordPieceTokenizer::State::run(std::string_view text, std::size_t limit, std::string_view op,
                                    detail::Pieces& out) const {
  detail::check_utf8(text, op);
  if (out.size() >= limit) return;
  raw_tokens.split(
      text,
      [&](std::string_view part) {
        run_segment(part, limit, out);
        return out.size() < limit;
      },
      [&](const detail::TokenMatcher<char>::Match& match) {
        out.add(match.id, vocab[static_cast<std::size_t>(match.id)]);
        return out.size() < limit;
      });
  out.truncate(limit);
}

void WordPieceTokenizer::State::run_segment(std::string_view raw, std::size_t limit,
                                            detail::Pieces& out) const {
  const std::u32string normalized = detail::normalize(detail::decode_utf8(raw), normalizer);
  normalized_tokens.split(
      std::u32string_view(normalized),
      [&](std::u32string_view part) {
        run_words(part, limit, out);
        return out.size() < limit;
      },
      [&](const detail::TokenMatcher<char32_t>::Match& match) {
        // `tokenizers` names the piece by the text it matched (the normalised content).
        out.add(match.id, detail::encode_utf8(
                              std::u32string_view(normalized).substr(match.begin, match.length)));
        return out.size() < limit;
      });
}

void WordPieceTokenizer::State::run_words(std::u32string_view normalized, std::size_t limit,
                                          detail::Pieces& out) const {
  std::vector<std::u32string_view> words;
  detail::split_words(normalized, words);
  for (std::u32string_view word : words) {
    if (out.size() >= limit) return;
    detail::split_word(word, model, out);
  }
}

WordPieceTokenizer::WordPieceTokenizer(std::vector<std::string> vocab, WordPieceOptions options) {
  constexpr std::string_view kOp = "text::WordPieceTokenizer";
  auto state = std::make_shared<State>();
  resolve_max_length(options.max_length, options, kOp);
  state->index.reserve(vocab.size());
  for (std::size_t id = 0; id < vocab.size(); ++id) {
    state->index.insert_or_assign(vocab[id], static_cast<std::int64_t>(id));
  }
  state->vocab = std::move(vocab);
  state->normalizer = {.clean_text = options.clean_text,
                       .split_chinese_chars = options.split_chinese_chars,
                       .strip_accents = options.strip_accents.value_or(options.lowercase),
                       .lowercase = options.lowercase};
  state->model = {.index = &state->index,
                  .continuing_prefix = options.continuing_prefix,
                  .max_chars_per_word = options.max_chars_per_word,
                  .unk_id = state->required_id("unk", options.unk_token),
                  .unk_token = options.unk_token};
  state->cls_id = state->required_id("cls", options.cls_token);
  state->sep_id = state->required_id("sep", options.sep_token);
  state->pad_id = state->required_id("pad", options.pad_token);

  if (options.match_special_tokens) {
    for (const std::string* special : {&options.unk_token, &options.cls_token, &options.sep_token,
                                       &options.pad_token, &options.mask_token}) {
      const auto found = state->index.find(*special);
      if (!special->empty() && found != state->index.end()) {
        state->raw_tokens.add(*special, found->second);
      }
    }
  }
  for (const AddedToken& added : options.added_tokens) {
    if (added.content.empty()) fail<InvalidArgument>(kOp, "an added token is empty");
    const std::int64_t id = state->required_id("added", added.content);
    if (!added.normalized) {
      state->raw_tokens.add(added.content, id);
      continue;
    }
    // Matched as the normaliser leaves its content; one that normalises to nothing never matches.
    detail::check_utf8(added.content, kOp);
    std::u32string pattern =
        detail::normalize(detail::decode_utf8(added.content), state->normalizer);
    if (!pattern.empty()) state->normalized_tokens.add(std::move(pattern), id);
  }
  state->options = std::move(options);
  state_ = std::move(state);
}

std::vector<std::string> WordPieceTokenizer::tokenize(std::string_view utf8) const {
  std::vector<std::string> tokens;
  detail::Pieces pieces{.ids = {}, .tokens = &tokens};
  state_->run(utf8, std::numeric_limits<std::size_t>::max(), "text::WordPieceTokenizer::tokenize",
              pieces);
  return tokens;
}

Encoding WordPieceTokenizer::encode(std::string_view utf8, std::size_t max_length) const {
  constexpr std::string_view kOp = "text::WordPieceTokenizer::encode";
  const std::size_t length = resolve_max_length(max_length, state_->options, kOp);
  Encoding encoding;
  encoding.tokens.push_back(state_->options.cls_token);
  detail::Pieces pieces{.ids = {state_->cls_id}, .tokens = &encoding.tokens};
  state_->run(utf8, length - 1, kOp, pieces);
  pieces.add(state_->sep_id, state_->options.sep_token);
  encoding.ids = std::move(pieces.ids);
  return encoding;
}

BatchEncoding WordPieceTokenizer::encode_batch(const std::vector<std::string>& texts,
                                               std::size_t max_length) const {
  constexpr std::string_view kOp = "text::WordPieceTokenizer::encode_batch";
  const std::size_t length = resolve_max_length(max_length, state_->options, kOp);
  std::vector<std::vector<std::int64_t>> rows;
  rows.reserve(texts.size());
  std::size_t cols = 0;
  for (const std::string& text : texts) {
    detail::Pieces pieces{.ids = {state_->cls_id}, .tokens = nullptr};
    state_->run(text, length - 1, kOp, pieces);
    pieces.ids.push_back(state_->sep_id);
    cols = std::max(cols, pieces.ids.size());
    rows.push_back(std::move(pieces.ids));
  }
  BatchEncoding batch;
  batch.rows = static_cast<std::int64_t>(rows.size());
  batch.cols = static_cast<std::int64_t>(cols);
  batch.ids.assign(rows.size() * cols, state_->pad_id);
  batch.attention_mask.assign(rows.size() * cols, 0);
  batch.token_type_ids.assign(rows.size() * cols, 0);
  for (std::size_t row = 0; row < rows.size(); ++row) {
    std::copy(rows[row].begin(), rows[row].end(), batch.ids.begin() + row * cols);
    std::fill_n(batch.attention_mask.begin() + row * cols, rows[row].size(), 1);
  }
  return batch;
}

std::int64_t WordPieceTokenizer::token_id(std::string_view token) const {
  const auto found = state_->index.find(token);
  if (found == state_->index.end()) {
    fail<InvalidArgument>("text::WordPieceTokenizer::token_id", "no token '", token,
                          "' in the vocabulary (", state_->vocab.size(), " tokens)");
  }
  return found->second;
}

const std::string& WordPieceTokenizer::id_to_token(std::int64_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= state_->vocab.size()) {
    fail<InvalidArgument>("text::WordPieceTokenizer::id_to_token", "id ", id,
                          " is outside the vocabulary [0, ", state_->vocab.size(), ")");
  }
  return state_->vocab[static_cast<std::size_t>(id)];
}

std::size_t WordPieceTokenizer::vocab_size() const { return state_->vocab.size(); }

const WordPieceOptions& WordPieceTokenizer::options() const { return state_->options; }

}  // namespace kiln::text
