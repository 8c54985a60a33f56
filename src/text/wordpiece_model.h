// The WordPiece model: one word to its pieces, greedily longest first.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kiln::text::detail {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};
using VocabIndex = std::unordered_map<std::string, std::int64_t, StringHash, std::equal_to<>>;

// Ids, and the tokens when asked for (tokens == nullptr: ids only).
struct Pieces {
  std::vector<std::int64_t> ids;
  std::vector<std::string>* tokens = nullptr;

  void add(std::int64_t id, std::string_view token) {
    ids.push_back(id);
    if (tokens != nullptr) tokens->emplace_back(token);
  }
  void truncate(std::size_t size) {
    if (ids.size() <= size) return;
    ids.resize(size);
    if (tokens != nullptr) tokens->resize(size);
  }
  std::size_t size() const { return ids.size(); }
};

struct WordPieceModel {
  const VocabIndex* index = nullptr;
  std::string continuing_prefix;
  std::size_t max_chars_per_word = 0;
  std::int64_t unk_id = 0;
  std::string unk_token;
};

// Appends the pieces of one word (normalised, not empty): the longest vocabulary entry from its
// start, then the longest continuing_prefix + rest entry from each following position. The word
// is the unk token if some position has no entry or it is longer than max_chars_per_word.
void split_word(std::u32string_view word, const WordPieceModel& model, Pieces& out);

}  // namespace kiln::text::detail
