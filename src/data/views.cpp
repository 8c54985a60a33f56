#include "kiln/data/views.h"

#include <algorithm>
#include <cmath>

#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::data::detail {

using kiln::detail::fail;

void check_subset_indices(const std::vector<std::size_t>& indices, std::size_t size) {
  for (std::size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] >= size) {
      fail<InvalidArgument>("subset", "indices[", i, "] = ", indices[i],
                            " is out of range for a dataset of ", size, " items");
    }
  }
}

void check_slice(std::size_t begin, std::size_t end, std::size_t size) {
  if (begin > end || end > size) {
    fail<InvalidArgument>("slice", "range [", begin, ", ", end, ") is not within a dataset of ",
                          size, " items");
  }
}

std::size_t split_point(double train_fraction, std::size_t size) {
  if (!(train_fraction >= 0.0 && train_fraction <= 1.0)) {
    fail<InvalidArgument>("random_split", "train_fraction ", train_fraction, " is not in [0, 1]");
  }
  const double cut = std::round(train_fraction * static_cast<double>(size));
  return std::min(size, static_cast<std::size_t>(cut));
}

std::pair<std::size_t, std::size_t> locate(const std::vector<std::size_t>& ends,
                                           std::size_t index) {
  // The first part whose end lies beyond index (empty parts have end == their start: skipped).
  const auto it = std::upper_bound(ends.begin(), ends.end(), index);
  const std::size_t part = static_cast<std::size_t>(it - ends.begin());
  const std::size_t start = part == 0 ? 0 : ends[part - 1];
  return {part, index - start};
}

}  // namespace kiln::data::detail
