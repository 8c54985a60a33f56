// BERT's character classes and transformations on top of utf8proc.
#include "text/unicode.h"

#include <utf8proc.h>

#include <cstdint>
#include <vector>

#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::text::detail {
namespace {

// The length of the UTF-8 sequence at text[at] and its code point; 0 if it is not UTF-8.
std::size_t next_code_point(std::string_view text, std::size_t at, char32_t& code_point) {
  const auto byte = static_cast<unsigned char>(text[at]);
  if (byte < 0x80) {
    code_point = byte;
    return 1;
  }
  utf8proc_int32_t decoded = 0;
  const auto length = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + at),
                                       static_cast<utf8proc_ssize_t>(text.size() - at), &decoded);
  if (length <= 0) return 0;
  code_point = static_cast<char32_t>(decoded);
  return static_cast<std::size_t>(length);
}

utf8proc_category_t category(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

}  // namespace

std::optional<std::size_t> find_invalid_utf8(std::string_view text) {
  char32_t c = 0;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t length = next_code_point(text, at, c);
    if (length == 0) return at;
    at += length;
  }
  return std::nullopt;
}

void check_utf8(std::string_view text, std::string_view op) {
  const std::optional<std::size_t> at = find_invalid_utf8(text);
  if (!at) return;
  constexpr char kHex[] = "0123456789abcdef";
  const auto byte = static_cast<unsigned char>(text[*at]);
  const char shown[] = {'0', 'x', kHex[byte >> 4], kHex[byte & 15], '\0'};
  kiln::detail::fail<InvalidArgument>(op, "invalid UTF-8 at byte ", *at, " (", shown, ")");
}

std::u32string decode_utf8(std::string_view valid_utf8) {
  std::u32string out;
  out.reserve(valid_utf8.size());
  char32_t c = 0;
  for (std::size_t at = 0; at < valid_utf8.size();) {
    const std::size_t length = next_code_point(valid_utf8, at, c);
    if (length == 0) {  // a caller's bug: the text was to be checked first
      kiln::detail::fail<InvalidArgument>("text::decode_utf8", "invalid UTF-8 at byte ", at);
    }
    out.push_back(c);
    at += length;
  }
  return out;
}

void append_utf8(std::string& out, char32_t code_point) {
  utf8proc_uint8_t bytes[4];
  const auto length = utf8proc_encode_char(static_cast<utf8proc_int32_t>(code_point), bytes);
  out.append(reinterpret_cast<const char*>(bytes), static_cast<std::size_t>(length));
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) append_utf8(out, c);
  return out;
}

bool is_whitespace(char32_t c) {
  if ((c >= '\t' && c <= '\r') || c == ' ' || c == 0x85) return true;
  if (c < 0x80) return false;
  const utf8proc_category_t cat = category(c);
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

bool is_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CS:
      return true;
    default:
      return false;
  }
}

bool is_punctuation(char32_t c) {
  if (c < 0x80) {
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
           (c >= 123 && c <= 126);
  }
  switch (category(c)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::u32string strip_accents(std::u32string_view text) {
  std::u32string out;
  out.reserve(text.size());
  bool ascii = true;
  for (char32_t c : text) ascii = ascii && c < 0x80;
  if (ascii) return std::u32string(text);  // NFD and Mn leave ASCII alone
  // utf8proc reorders combining marks only over a whole string (canonical order is a property of
  // runs of marks), so the text is decomposed at once, through UTF-8.
  const std::string utf8 = encode_utf8(text);
  const auto options = static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  std::vector<utf8proc_int32_t> decomposed(text.size() * 2 + 4);
  for (;;) {
    const utf8proc_ssize_t length =
        utf8proc_decompose(reinterpret_cast<const utf8proc_uint8_t*>(utf8.data()),
                           static_cast<utf8proc_ssize_t>(utf8.size()), decomposed.data(),
                           static_cast<utf8proc_ssize_t>(decomposed.size()), options);
    if (length < 0) {
      kiln::detail::fail<InvalidArgument>("text::strip_accents", utf8proc_errmsg(length));
    }
    if (static_cast<std::size_t>(length) <= decomposed.size()) {
      decomposed.resize(static_cast<std::size_t>(length));
      break;
    }
    decomposed.resize(static_cast<std::size_t>(length));  // too small: the size it needs
  }
  for (utf8proc_int32_t c : decomposed) {
    if (utf8proc_category(c) != UTF8PROC_CATEGORY_MN) out.push_back(static_cast<char32_t>(c));
  }
  return out;
}

void lowercase(std::u32string& text) {
  constexpr char32_t kCapitalIWithDot = 0x130;  // the one code point whose lower case is two
  std::size_t specials = 0;
  for (char32_t& c : text) {
    if (c < 0x80) {
      if (c >= 'A' && c <= 'Z') c += 'a' - 'A';
    } else if (c == kCapitalIWithDot) {
      ++specials;
    } else {
      c = static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
    }
  }
  if (specials == 0) return;
  std::u32string out;
  out.reserve(text.size() + specials);
  for (char32_t c : text) {
    if (c == kCapitalIWithDot) {
      out += U"i\u0307";
    } else {
      out.push_back(c);
    }
  }
  text = std::move(out);
}

}  // namespace kiln::text::detail
