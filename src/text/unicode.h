// The character classes and transformations of BERT's text pipeline, over Unicode code points,
// as Hugging Face's `tokenizers` defines them (utf8proc supplies the Unicode data).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kiln::text::detail {

// The byte offset of the first sequence that is not UTF-8 (overlong forms, surrogates and values
// past U+10FFFF included), if any.
std::optional<std::size_t> find_invalid_utf8(std::string_view text);
// InvalidArgument "[op] invalid UTF-8 at byte N (0xXX)" if text is not UTF-8.
void check_utf8(std::string_view text, std::string_view op);
// The code points of UTF-8 that find_invalid_utf8 accepts.
std::u32string decode_utf8(std::string_view valid_utf8);
void append_utf8(std::string& out, char32_t code_point);
std::string encode_utf8(std::u32string_view text);

// Rust's char::is_whitespace (the White_Space property): Zs, Zl, Zp, tab to carriage return
// and U+0085.
bool is_whitespace(char32_t c);
// What clean_text drops besides NUL and U+FFFD: categories Cc, Cf, Co and Cs, except tab,
// newline and carriage return (which are white space).
bool is_control(char32_t c);
// ASCII punctuation (33-47, 58-64, 91-96, 123-126) or a Unicode P* category.
bool is_punctuation(char32_t c);
// The CJK ideograph blocks `tokenizers` puts spaces around.
bool is_chinese_char(char32_t c);

// NFD, without the nonspacing marks (Mn) it leaves.
std::u32string strip_accents(std::u32string_view text);
// Every character lower-cased (full lower-casing, no context: U+0130 becomes i U+0307).
void lowercase(std::u32string& text);

}  // namespace kiln::text::detail
