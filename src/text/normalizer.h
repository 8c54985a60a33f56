// BertNormalizer and BertPreTokenizer: text to the words WordPiece splits.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln::text::detail {

struct NormalizerFlags {
  bool clean_text = true;
  bool split_chinese_chars = true;
  bool strip_accents = true;
  bool lowercase = true;
};

// Clean, space CJK ideographs, strip accents, lower-case: in that order, as `tokenizers` does.
std::u32string normalize(std::u32string_view text, const NormalizerFlags& flags);

// The words of normalised text: split on white space (dropped) and on punctuation (each mark a
// word of its own). Views into text.
void split_words(std::u32string_view text, std::vector<std::u32string_view>& words);

}  // namespace kiln::text::detail
