#include "kiln/data/digits.h"

#include <cmath>

#include "kiln/data/csv.h"
#include "kiln/detail/format.h"

namespace kiln::data {

using kiln::detail::fail;

namespace {

bool integer_in(double v, double low, double high) {
  return std::trunc(v) == v && v >= low && v <= high;
}

}  // namespace

DatasetPtr<ClassificationItem> load_digits(const std::filesystem::path& path) {
  const CsvTable table = read_csv(path);
  const std::size_t columns = kDigitsPixels + 1;
  if (table.num_rows() == 0) fail<CsvError>("load_digits", table.source, " holds no rows");
  if (table.num_columns != columns) {
    fail<CsvError>("load_digits", table.source, ":", table.lines.front(), ": expected ", columns,
                   " columns (64 pixels, then the label), found ", table.num_columns);
  }
  std::vector<ClassificationItem> items(table.num_rows());
  for (std::size_t row = 0; row < table.num_rows(); ++row) {
    ClassificationItem& item = items[row];
    item.features.resize(kDigitsPixels);
    for (std::size_t p = 0; p < kDigitsPixels; ++p) {
      const double v = table.at(row, p);
      if (!integer_in(v, 0, 16)) {
        fail<CsvError>("load_digits", table.source, ":", table.lines[row], ": pixel ", p, " is ", v,
                       ", not an integer in 0..16");
      }
      // Each pixel counts the set cells of a 4x4 block: 16 is a full block.
      item.features[p] = static_cast<float>(v / 16.0);
    }
    const double label = table.at(row, kDigitsPixels);
    if (!integer_in(label, 0, static_cast<double>(kDigitsClasses - 1))) {
      fail<CsvError>("load_digits", table.source, ":", table.lines[row], ": label ", label,
                     " is not a digit 0..9");
    }
    item.label = static_cast<std::int64_t>(label);
  }
  return in_memory(std::move(items));
}

}  // namespace kiln::data
