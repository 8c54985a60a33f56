// Reading files for the tokenizer: bytes, vocab.txt lines and checked JSON values.
#include "text/files.h"

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <iterator>
#include <system_error>

#include "kiln/detail/format.h"
#include "kiln/error.h"
#include "text/unicode.h"

namespace kiln::text::detail {

using kiln::detail::fail;

namespace {

// A value of the file as a message shows it: its JSON, cut after 80 characters.
std::string shown(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 80) + "...";
  return text;
}

}  // namespace

std::string read_file(const std::filesystem::path& path, std::string_view op) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (error || !std::filesystem::exists(status)) {
    fail<InvalidArgument>(op, path.string(), ": cannot read: no such file");
  }
  if (!std::filesystem::is_regular_file(status)) {
    fail<InvalidArgument>(op, path.string(), ": cannot read: not a regular file");
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    fail<InvalidArgument>(op, path.string(),
                          ": cannot open: ", std::generic_category().message(errno));
  }
  // One read of the whole file (an istreambuf_iterator copies a character at a time).
  std::string bytes(static_cast<std::size_t>(std::filesystem::file_size(path, error)), '\0');
  if (error) fail<InvalidArgument>(op, path.string(), ": cannot read: ", error.message());
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<std::size_t>(in.gcount()));
  if (in.bad()) fail<InvalidArgument>(op, path.string(), ": read failed");
  return bytes;
}

std::vector<std::string> read_vocab_file(const std::filesystem::path& path, std::string_view op) {
  const std::string bytes = read_file(path, op);
  std::vector<std::string> vocab;
  std::size_t start = 0;
  while (start < bytes.size()) {  // a final line break ends the last line, not a new one
    std::size_t end = bytes.find('\n', start);
    if (end == std::string::npos) end = bytes.size();
    const std::string_view line(bytes.data() + start, end - start);
    if (const std::optional<std::size_t> bad = find_invalid_utf8(line)) {
      fail<InvalidArgument>(op, path.string(), ": line ", vocab.size() + 1, " is not UTF-8 (byte ",
                            *bad, " of the line)");
    }
    std::u32string token = decode_utf8(line);
    while (!token.empty() && is_whitespace(token.back())) token.pop_back();  // \r too
    vocab.push_back(token.size() == line.size() ? std::string(line) : encode_utf8(token));
    start = end + 1;
  }
  return vocab;
}

Json read_json_file(const std::filesystem::path& path, std::string_view op,
                    const Json::parser_callback_t& callback) {
  const std::string bytes = read_file(path, op);
  try {
    return Json::parse(bytes, callback);
  } catch (const Json::exception& error) {
    fail<InvalidArgument>(op, path.string(), " is not JSON: ", error.what());
  }
}

WordPieceTokenizer build(TokenizerSpec spec, std::string_view op, std::string_view origin) {
  try {
    return WordPieceTokenizer(std::move(spec.vocab), std::move(spec.options));
  } catch (const InvalidArgument& error) {
    std::string_view what = error.what();
    if (what.starts_with('[')) what.remove_prefix(std::min(what.find("] ") + 2, what.size()));
    fail<InvalidArgument>(op, origin, ": ", what);
  }
}

void JsonReader::fail(std::string_view what) const {
  kiln::detail::fail<InvalidArgument>(op_, origin_, ": ", what);
}

const Json* JsonReader::find(const Json& object, std::string_view key,
                             std::string_view where) const {
  if (!object.is_object()) fail(kiln::detail::concat(where, " is not an object: ", shown(object)));
  const auto found = object.find(key);
  return found == object.end() ? nullptr : &*found;
}

std::string JsonReader::string_at(const Json& object, std::string_view key, std::string_view where,
                                  const std::string* fallback) const {
  const Json* value = find(object, key, where);
  if ((value == nullptr || value->is_null()) && fallback != nullptr) return *fallback;
  if (value == nullptr) fail(kiln::detail::concat(where, " has no \"", key, "\""));
  if (!value->is_string()) {
    fail(kiln::detail::concat(where, "'s \"", key, "\" is not a string: ", shown(*value)));
  }
  return value->get<std::string>();
}

bool JsonReader::bool_at(const Json& object, std::string_view key, std::string_view where,
                         bool fallback) const {
  const Json* value = find(object, key, where);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) {
    fail(kiln::detail::concat(where, "'s \"", key, "\" is not true or false: ", shown(*value)));
  }
  return value->get<bool>();
}

std::uint64_t JsonReader::count_at(const Json& object, std::string_view key, std::string_view where,
                                   const std::uint64_t* fallback) const {
  const Json* value = find(object, key, where);
  if ((value == nullptr || value->is_null()) && fallback != nullptr) return *fallback;
  if (value == nullptr) fail(kiln::detail::concat(where, " has no \"", key, "\""));
  return as_count(*value, kiln::detail::concat(where, "'s \"", key, "\""));
}

std::uint64_t JsonReader::as_count(const Json& value, std::string_view where) const {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (value.is_number_integer() && value.get<std::int64_t>() >= 0) {
    return static_cast<std::uint64_t>(value.get<std::int64_t>());
  }
  fail(kiln::detail::concat(where, " is not an integer >= 0: ", shown(value)));
}

}  // namespace kiln::text::detail
