#include <cmath>

#include "kiln/data/csv.h"
#include "kiln/detail/format.h"

namespace kiln::data {

using kiln::detail::fail;

std::size_t Column::resolve(const CsvTable& table) const {
  if (const auto* name = std::get_if<std::string>(&ref_)) return table.column(*name);
  const std::int64_t index = std::get<std::int64_t>(ref_);
  const auto columns = static_cast<std::int64_t>(table.num_columns);
  const std::int64_t resolved = index < 0 ? index + columns : index;
  if (resolved < 0 || resolved >= columns) {
    fail<InvalidArgument>("CsvDataset", "column ", index, " is out of range for ", table.source,
                          ", which has ", columns, " columns");
  }
  return static_cast<std::size_t>(resolved);
}

CsvDataset::CsvDataset(const std::filesystem::path& path, CsvDatasetOptions options)
    : CsvDataset(read_csv(path, options.csv), options) {}

CsvDataset::CsvDataset(const CsvTable& table, const CsvDatasetOptions& options) {
  label_column_ = options.label.resolve(table);
  if (options.features.empty()) {
    for (std::size_t c = 0; c < table.num_columns; ++c) {
      if (c != label_column_) feature_columns_.push_back(c);
    }
  } else {
    for (const Column& column : options.features) feature_columns_.push_back(column.resolve(table));
  }
  if (feature_columns_.empty()) {
    fail<InvalidArgument>("CsvDataset", table.source, " has no feature column besides the label");
  }
  num_features_ = feature_columns_.size();
  features_.reserve(table.num_rows() * num_features_);
  labels_.reserve(table.num_rows());
  // Doubles hold every integer up to 2^53 exactly; a label beyond that was already rounded.
  constexpr double kExactLimit = 9007199254740992.0;
  for (std::size_t row = 0; row < table.num_rows(); ++row) {
    for (std::size_t c : feature_columns_)
      features_.push_back(static_cast<float>(table.at(row, c)));
    const double label = table.at(row, label_column_);
    if (!(std::trunc(label) == label && std::fabs(label) <= kExactLimit)) {
      fail<CsvError>("CsvDataset", table.source, ":", table.lines[row], ": label column ",
                     label_column_, " holds ", label, ", which is not an integer");
    }
    labels_.push_back(static_cast<std::int64_t>(label));
  }
}

ClassificationItem CsvDataset::get(std::size_t index) const {
  detail::check_index("CsvDataset::get", index, labels_.size());
  const auto first = features_.begin() + static_cast<std::ptrdiff_t>(index * num_features_);
  return ClassificationItem{
      std::vector<float>(first, first + static_cast<std::ptrdiff_t>(num_features_)),
      labels_[index]};
}

}  // namespace kiln::data
