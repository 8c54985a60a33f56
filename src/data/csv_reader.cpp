// The RFC 4180 tokenizer and the numeric table built from it.
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

#include "kiln/data/csv.h"
#include "kiln/detail/format.h"

namespace kiln::data {
namespace {

using kiln::detail::fail;

bool is_blank(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

// The cell as it should appear in a message: quoted, and cut short if long.
std::string shown(std::string_view cell) {
  constexpr std::size_t kMax = 40;
  if (cell.size() > kMax) return kiln::detail::concat("\"", cell.substr(0, kMax), "...\"");
  return kiln::detail::concat("\"", cell, "\"");
}

// Splits text into records of fields, one call per record, counting lines for messages.
class Tokenizer {
 public:
  Tokenizer(const char* op, std::string_view text, std::string_view source, char delimiter)
      : op_(op), text_(text), source_(source), delimiter_(delimiter) {
    if (text_.starts_with("\xEF\xBB\xBF")) pos_ = 3;  // a UTF-8 byte-order mark
  }

  // The next record that is not blank; false at the end of the text.
  bool next(std::vector<std::string>& fields, std::size_t& line) {
    while (pos_ < text_.size()) {
      fields.clear();
      line = line_;
      bool quoted = false;
      for (;;) {
        std::string field;
        if (pos_ < text_.size() && text_[pos_] == '"') {
          quoted = true;
          read_quoted(field);
        } else {
          read_unquoted(field);
        }
        fields.push_back(std::move(field));
        if (pos_ >= text_.size()) break;
        if (text_[pos_] == delimiter_) {
          ++pos_;
          continue;
        }
        end_line();
        break;
      }
      const bool blank = fields.size() == 1 && !quoted && trim(fields[0]).empty();
      if (!blank) return true;
    }
    return false;
  }

  template <class... Parts>
  [[noreturn]] void error(std::size_t line, Parts&&... parts) const {
    fail<CsvError>(op_, source_, ":", line, ": ", std::forward<Parts>(parts)...);
  }

 private:
  void read_quoted(std::string& field) {
    const std::size_t open_line = line_;
    ++pos_;
    for (;;) {
      if (pos_ >= text_.size()) error(open_line, "a quoted field is never closed");
      const char c = text_[pos_];
      if (c == '"') {
        if (pos_ + 1 < text_.size() && text_[pos_ + 1] == '"') {
          field += '"';
          pos_ += 2;
          continue;
        }
        ++pos_;
        break;
      }
      if (c == '\n') ++line_;
      field += c;
      ++pos_;
    }
    while (pos_ < text_.size() && text_[pos_] != delimiter_ && is_blank(text_[pos_])) ++pos_;
    if (pos_ < text_.size() && !ends_field(text_[pos_])) {
      error(line_, "unexpected ", shown(text_.substr(pos_, 1)), " after a closing quote");
    }
  }

  void read_unquoted(std::string& field) {
    const std::size_t start = pos_;
    while (pos_ < text_.size() && !ends_field(text_[pos_])) {
      if (text_[pos_] == '"') {
        error(line_, "a quote inside an unquoted field (quote the whole field and double the ",
              "quotes inside it)");
      }
      ++pos_;
    }
    field.assign(text_.substr(start, pos_ - start));
  }

  bool ends_field(char c) const { return c == delimiter_ || c == '\n' || c == '\r'; }

  void end_line() {  // at a CR, LF or CR LF
    if (text_[pos_] == '\r' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '\n') ++pos_;
    ++pos_;
    ++line_;
  }

  const char* op_;
  std::string_view text_;
  std::string_view source_;
  char delimiter_;
  std::size_t pos_ = 0;
  std::size_t line_ = 1;
};

// A cell as a number: surrounding blanks ignored, an optional '+', anything from_chars reads.
bool parse_number(std::string_view cell, double& value, bool& out_of_range) {
  cell = trim(cell);
  if (cell.size() > 1 && cell.front() == '+' && cell[1] != '-' && cell[1] != '+') {
    cell.remove_prefix(1);
  }
  if (cell.empty()) return false;
  const auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
  out_of_range = ec == std::errc::result_out_of_range;
  return ec == std::errc() && end == cell.data() + cell.size();
}

CsvTable parse(const char* op, std::string_view text, std::string_view source,
               const CsvOptions& options) {
  const char d = options.delimiter;
  if (d == '"' || d == '\r' || d == '\n') {
    fail<InvalidArgument>(op, "the delimiter cannot be a quote or a line break");
  }
  CsvTable table;
  table.source = std::string(source);
  Tokenizer tokens(op, text, source, d);
  std::vector<std::string> fields;
  std::size_t line = 0;
  bool width_known = false;
  std::size_t width_line = 0;  // the record that fixed the width, for messages
  if (options.has_header) {
    if (!tokens.next(fields, line)) {
      fail<CsvError>(op, source, ": no header row (the file holds no records)");
    }
    for (const std::string& name : fields) table.header.emplace_back(trim(name));
    table.num_columns = fields.size();
    width_known = true;
    width_line = line;
  }
  while (tokens.next(fields, line)) {
    if (!width_known) {
      table.num_columns = fields.size();
      width_known = true;
      width_line = line;
    }
    if (fields.size() != table.num_columns) {
      tokens.error(line, "expected ", table.num_columns, " fields (as on line ", width_line,
                   "), found ", fields.size());
    }
    for (std::size_t c = 0; c < fields.size(); ++c) {
      double value = 0;
      bool out_of_range = false;
      if (parse_number(fields[c], value, out_of_range)) {
        table.values.push_back(value);
        continue;
      }
      const std::string name = table.header.empty()
                                   ? std::string()
                                   : kiln::detail::concat(" (", shown(table.header[c]), ")");
      if (trim(fields[c]).empty()) tokens.error(line, "column ", c, name, " is empty");
      tokens.error(line, "column ", c, name, ": ", shown(fields[c]),
                   out_of_range ? " is out of the range of a double" : " is not a number");
    }
    table.lines.push_back(line);
  }
  return table;
}

}  // namespace

std::size_t CsvTable::column(std::string_view name) const {
  if (header.empty()) {
    fail<InvalidArgument>("CsvTable::column", source, " has no header row, so no column is named ",
                          shown(name));
  }
  for (std::size_t c = 0; c < header.size(); ++c) {
    if (header[c] == name) return c;
  }
  std::string names;
  for (const std::string& h : header) names += (names.empty() ? "" : ", ") + shown(h);
  fail<InvalidArgument>("CsvTable::column", source, " has no column named ", shown(name),
                        " (columns: ", names, ")");
}

CsvTable parse_csv(std::string_view text, std::string_view source, CsvOptions options) {
  return parse("parse_csv", text, source, options);
}

CsvTable read_csv(const std::filesystem::path& path, CsvOptions options) {
  const std::string source = path.string();
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    fail<CsvError>("read_csv", "cannot read ", source, ": it is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail<CsvError>("read_csv", "cannot open ", source, ": ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail<CsvError>("read_csv", "cannot read ", source, ": ", std::strerror(errno));
  return parse("read_csv", text.view(), source, options);
}

}  // namespace kiln::data
