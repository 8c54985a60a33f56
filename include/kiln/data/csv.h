// Numeric CSV files: a table reader, and a classification dataset built from chosen columns.
//
//   // iris.csv:  sepal_length,sepal_width,petal_length,petal_width,species
//   //            5.1,3.5,1.4,0.2,0
//   data::CsvTable table = data::read_csv("iris.csv", {.has_header = true});
//   double v = table.at(0, table.column("petal_length"));            // 1.4
//
//   auto iris = std::make_shared<data::CsvDataset>("iris.csv", data::CsvDatasetOptions{
//       .csv = {.has_header = true}, .label = "species"});           // features: the other 4
//   data::ClassificationItem first = iris->get(0);                    // {5.1, 3.5, 1.4, 0.2}, 0
//
// The format is RFC 4180 with a configurable delimiter: a field may be enclosed in double
// quotes (then it may hold the delimiter, line breaks and "" for a quote); lines end in LF or
// CRLF; a UTF-8 byte-order mark is skipped; blank lines are skipped. Every cell outside the
// header must be a number (spaces and tabs around it are ignored; "nan" and "inf" are accepted);
// there are no missing values. Every row must have as many fields as the first.
//
// Errors name the file and line: CsvError "[read_csv] iris.csv:7: column 2 ("petal_length"):
// "abc" is not a number". Columns are numbered from 0, as in the API.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/data/classification.h"
#include "kiln/data/dataset.h"
#include "kiln/error.h"

namespace kiln::data {

// Malformed CSV content or a file that cannot be read; the message names the file and line.
class CsvError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

struct CsvOptions {
  bool has_header = false;  // the first (non-blank) row names the columns
  char delimiter = ',';     // not '"', '\r' or '\n'
};

// The cells of a numeric CSV file, row-major.
struct CsvTable {
  std::string source;               // the file name (or the name given to parse_csv)
  std::vector<std::string> header;  // empty without a header
  std::size_t num_columns = 0;
  std::vector<double> values;      // num_rows() * num_columns
  std::vector<std::size_t> lines;  // the line each row starts on, for messages

  std::size_t num_rows() const noexcept { return lines.size(); }
  double at(std::size_t row, std::size_t column) const {
    return values[row * num_columns + column];
  }
  // The index of the column with this header name; InvalidArgument without a header or when
  // no column has that name.
  std::size_t column(std::string_view name) const;
};

// Reads and parses a file; CsvError if it cannot be opened or read.
CsvTable read_csv(const std::filesystem::path& path, CsvOptions options = {});
// Parses CSV text; source names it in error messages.
CsvTable parse_csv(std::string_view text, std::string_view source, CsvOptions options = {});

// A column chosen by index (negative counts from the end: -1 is the last) or by header name.
class Column {
 public:
  template <std::integral I>
  requires(!std::same_as<I, bool>) Column(I index)
      : ref_(static_cast<std::int64_t>(index)) {}        // NOLINT: implicit on purpose
  Column(std::string name) : ref_(std::move(name)) {}    // NOLINT
  Column(const char* name) : ref_(std::string(name)) {}  // NOLINT
  // The index in table; InvalidArgument when out of range or not found.
  std::size_t resolve(const CsvTable& table) const;

 private:
  std::variant<std::int64_t, std::string> ref_;
};

struct CsvDatasetOptions {
  CsvOptions csv{};
  Column label = -1;               // must hold integers
  std::vector<Column> features{};  // empty: every column but the label, in file order
};

// Classification items from a CSV table: the chosen feature columns (as floats) and an integer
// label column. CsvError, naming file and line, for a label that is not an integer.
class CsvDataset final : public Dataset<ClassificationItem> {
 public:
  CsvDataset(const std::filesystem::path& path, CsvDatasetOptions options = {});
  CsvDataset(const CsvTable& table, const CsvDatasetOptions& options);

  std::size_t size() const override { return labels_.size(); }
  ClassificationItem get(std::size_t index) const override;
  std::size_t num_features() const noexcept { return num_features_; }
  const std::vector<std::size_t>& feature_columns() const noexcept { return feature_columns_; }
  std::size_t label_column() const noexcept { return label_column_; }

 private:
  std::size_t num_features_ = 0;
  std::vector<std::size_t> feature_columns_;
  std::size_t label_column_ = 0;
  std::vector<float> features_;  // size() * num_features_, row-major
  std::vector<std::int64_t> labels_;
};

}  // namespace kiln::data
