#include "runtime/autotune.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <system_error>

#include "core/atomic_file.h"

namespace kiln::autotune {

namespace {

std::string default_path() {
  std::string base;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    base = xdg;
  } else if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/') {
    base = std::string(home) + "/.cache";
  } else {
    return {};
  }
  return base + "/kiln/autotune.tsv";
}

struct Table {
  std::mutex mutex;
  bool loaded = false;
  std::string path = default_path();
  std::map<std::string, Choice, std::less<>> choices;
};

Table& table() {
  static Table& t = *new Table;  // never destroyed: used from other statics' destructors
  return t;
}

// One line per choice: key, choice, heuristic µs, chosen µs, separated by tabs. Keys and choices
// never hold tabs or newlines (kiln builds them); a line that does not parse is skipped.
std::optional<Choice> parse_line(const std::string& line) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  for (std::size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1) {
    fields.push_back(line.substr(start, tab - start));
  }
  fields.push_back(line.substr(start));
  if (fields.size() != 4 || fields[0].empty()) return std::nullopt;
  Choice c{fields[0], fields[1], 0, 0};
  char* end = nullptr;
  c.heuristic_us = std::strtod(fields[2].c_str(), &end);
  if (end == fields[2].c_str() || *end != '\0') return std::nullopt;
  c.chosen_us = std::strtod(fields[3].c_str(), &end);
  if (end == fields[3].c_str() || *end != '\0') return std::nullopt;
  return c;
}

bool clean(std::string_view text) { return text.find_first_of("\t\n\r") == std::string_view::npos; }

void load_locked(Table& t) {
  if (t.loaded) return;
  t.loaded = true;
  const std::string& path = t.path;
  if (path.empty()) return;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (std::optional<Choice> c = parse_line(line)) t.choices.emplace(c->key, std::move(*c));
  }
}

// The file read again (another process may have added choices since), this process's own
// choices kept over the file's.
void reload_locked(Table& t) {
  std::map<std::string, Choice, std::less<>> mine = std::move(t.choices);
  t.choices.clear();
  t.loaded = false;
  load_locked(t);
  for (auto& [key, c] : mine) t.choices.insert_or_assign(key, std::move(c));
}

void save_locked(const Table& t) {
  const std::string& path = t.path;
  if (path.empty()) return;
  std::ostringstream out;
  for (const auto& [key, c] : t.choices) {
    out << c.key << '\t' << c.choice << '\t' << c.heuristic_us << '\t' << c.chosen_us << '\n';
  }
  try {
    std::error_code ignored;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ignored);
    detail::write_file_atomically(path, out.str(), "autotune");
  } catch (const std::exception&) {
    // best effort, as documented
  }
}

}  // namespace

bool enabled() {
  static const bool on = [] {
    const char* value = std::getenv("KILN_AUTOTUNE");
    return value == nullptr || std::string_view(value) != "0";
  }();
  return on;
}

std::string cache_path() {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  return t.path;
}

void set_cache_path(std::string path) {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  t.path = std::move(path);
  t.choices.clear();
  t.loaded = false;
}

std::optional<Choice> find(std::string_view key) {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  load_locked(t);
  const auto it = t.choices.find(key);
  if (it == t.choices.end()) return std::nullopt;
  return it->second;
}

void remember(const Choice& choice) {
  if (choice.key.empty() || !clean(choice.key) || !clean(choice.choice)) return;
  Table& t = table();
  std::lock_guard lock(t.mutex);
  reload_locked(t);
  t.choices.insert_or_assign(choice.key, choice);
  save_locked(t);
}

std::vector<Choice> entries() {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  reload_locked(t);
  std::vector<Choice> out;
  out.reserve(t.choices.size());
  for (const auto& [key, c] : t.choices) out.push_back(c);
  return out;
}

void clear() {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  t.choices.clear();
  t.loaded = true;
  if (!t.path.empty()) {
    std::error_code ignored;
    std::filesystem::remove(t.path, ignored);
  }
}

std::string choose(std::string_view key, int candidates, const std::function<double(int)>& seconds,
                   const std::function<std::string(int)>& encode) {
  if (!enabled() || candidates <= 1) return encode(0);
  if (std::optional<Choice> known = find(key)) return known->choice;
  return measure(key, candidates, seconds, encode);
}

std::string measure(std::string_view key, int candidates, const std::function<double(int)>& seconds,
                    const std::function<std::string(int)>& encode) {
  if (!enabled() || candidates <= 1) return encode(0);
  const double heuristic = seconds(0);
  int best = 0;
  double best_seconds = heuristic;
  for (int i = 1; i < candidates; ++i) {
    const double s = seconds(i);
    if (s < best_seconds && s <= heuristic * kAutotuneMargin) {
      best = i;
      best_seconds = s;
    }
  }
  Choice c{std::string(key), encode(best), heuristic * 1e6, best_seconds * 1e6};
  remember(c);
  return c.choice;
}

std::string to_hex(const void* data, std::size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::string out(size * 2, '0');
  for (std::size_t i = 0; i < size; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return out;
}

bool from_hex(std::string_view hex, void* data, std::size_t size) {
  if (hex.size() != size * 2) return false;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  auto* bytes = static_cast<unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) {
    const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    bytes[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return true;
}

}  // namespace kiln::autotune
