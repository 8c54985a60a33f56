// Finding added tokens in a text: leftmost match first, the longest of those starting there (the
// aho-corasick LeftmostLongest search `tokenizers` runs). Patterns are bucketed by their first
// character, so a search costs one hash lookup per position plus the comparisons of the
// patterns sharing that character.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kiln::text::detail {

template <class Char>
class TokenMatcher {
 public:
  struct Match {
    std::size_t begin = 0, length = 0;
    std::int64_t id = 0;
  };

  // Patterns must not be empty. A pattern added twice keeps its first id.
  void add(std::basic_string<Char> pattern, std::int64_t id) {
    std::vector<Entry>& bucket = by_first_[pattern.front()];
    for (const Entry& entry : bucket) {
      if (entry.pattern == pattern) return;
    }
    bucket.push_back({std::move(pattern), id});
    std::stable_sort(bucket.begin(), bucket.end(), [](const Entry& a, const Entry& b) {
      return a.pattern.size() > b.pattern.size();
    });
  }

  bool empty() const { return by_first_.empty(); }

  // Walks text in order: on_text(part) for each stretch between matches (never empty), then
  // on_token(match) for the match after it. Stops when either returns false.
  template <class OnText, class OnToken>
  void split(std::basic_string_view<Char> text, OnText on_text, OnToken on_token) const {
    std::size_t at = 0;
    while (at < text.size()) {
      const std::optional<Match> match = find(text, at);
      const std::size_t end = match ? match->begin : text.size();
      if (end > at && !on_text(text.substr(at, end - at))) return;
      if (!match || !on_token(*match)) return;
      at = match->begin + match->length;
    }
  }

  // The first match at or after from, if any.
  std::optional<Match> find(std::basic_string_view<Char> text, std::size_t from) const {
    if (by_first_.empty()) return std::nullopt;
    for (std::size_t at = from; at < text.size(); ++at) {
      const auto bucket = by_first_.find(text[at]);
      if (bucket == by_first_.end()) continue;
      const std::basic_string_view<Char> rest = text.substr(at);
      for (const Entry& entry : bucket->second) {  // longest first
        if (rest.starts_with(entry.pattern)) return Match{at, entry.pattern.size(), entry.id};
      }
    }
    return std::nullopt;
  }

 private:
  struct Entry {
    std::basic_string<Char> pattern;
    std::int64_t id;
  };
  std::unordered_map<Char, std::vector<Entry>> by_first_;
};

}  // namespace kiln::text::detail
