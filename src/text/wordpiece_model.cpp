// Greedy longest-match-first WordPiece, as `tokenizers`' WordPiece::tokenize.
#include "text/wordpiece_model.h"

#include "text/unicode.h"

namespace kiln::text::detail {

void split_word(std::u32string_view word, const WordPieceModel& model, Pieces& out) {
  if (word.size() > model.max_chars_per_word) {
    out.add(model.unk_id, model.unk_token);
    return;
  }
  // The word in UTF-8 with the byte offset where each character starts (and the end).
  std::string utf8;
  std::vector<std::size_t> offsets;
  offsets.reserve(word.size() + 1);
  for (char32_t c : word) {
    offsets.push_back(utf8.size());
    append_utf8(utf8, c);
  }
  offsets.push_back(utf8.size());

  const std::size_t first_piece = out.size();
  std::string candidate = model.continuing_prefix;
  const std::size_t prefix_size = candidate.size();
  std::size_t start = 0;
  while (start < word.size()) {
    std::size_t end = word.size();
    const VocabIndex::const_iterator none = model.index->end();
    VocabIndex::const_iterator found = none;
    for (; end > start; --end) {
      const std::string_view piece(utf8.data() + offsets[start], offsets[end] - offsets[start]);
      if (start == 0) {
        found = model.index->find(piece);
      } else {
        candidate.resize(prefix_size);
        candidate += piece;
        found = model.index->find(candidate);
      }
      if (found != none) break;
    }
    if (found == none) {
      out.truncate(first_piece);
      out.add(model.unk_id, model.unk_token);
      return;
    }
    out.add(found->second, found->first);
    start = end;
  }
}

}  // namespace kiln::text::detail
