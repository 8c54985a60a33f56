// BertNormalizer and BertPreTokenizer over code points.
#include "text/normalizer.h"

#include "text/unicode.h"

namespace kiln::text::detail {

std::u32string normalize(std::u32string_view text, const NormalizerFlags& flags) {
  std::u32string out;
  out.reserve(text.size() + 8);
  for (char32_t c : text) {
    if (flags.clean_text) {
      if (c == 0 || c == 0xFFFD || is_control(c)) continue;
      if (is_whitespace(c)) c = ' ';
    }
    if (flags.split_chinese_chars && is_chinese_char(c)) {
      out.push_back(' ');
      out.push_back(c);
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  if (flags.strip_accents) out = strip_accents(out);
  if (flags.lowercase) lowercase(out);
  return out;
}

void split_words(std::u32string_view text, std::vector<std::u32string_view>& words) {
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    const bool space = is_whitespace(c);
    if (!space && !is_punctuation(c)) continue;
    if (i > start) words.push_back(text.substr(start, i - start));
    if (!space) words.push_back(text.substr(i, 1));
    start = i + 1;
  }
  if (text.size() > start) words.push_back(text.substr(start));
}

}  // namespace kiln::text::detail
