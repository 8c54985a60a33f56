// The UCI handwritten digits (E. Alpaydin and C. Kaynak, 1998), shipped in the repository as
// data/digits/digits.csv (see data/digits/README.md): 1,797 images of 8x8 pixels, each pixel a
// count 0..16, and the digit 0..9. Small enough to train a classifier in seconds on a CPU.
//
//   auto digits = data::load_digits("data/digits/digits.csv");   // 1797 items
//   auto [train, test] = data::random_split(digits, 0.8, 0);
//   data::ClassificationItem x = digits->get(0);   // 64 floats in [0, 1] (row-major 8x8), label 0
#pragma once

#include <cstddef>
#include <filesystem>

#include "kiln/data/classification.h"
#include "kiln/data/dataset.h"

namespace kiln::data {

inline constexpr std::size_t kDigitsPixels = 64;
inline constexpr std::size_t kDigitsClasses = 10;

// Reads the digits CSV (no header; 64 pixel columns, then the label) and scales each pixel by
// 1/16 into [0, 1]. CsvError, naming file and line, for a row that is not 65 columns, a pixel
// that is not an integer in 0..16, or a label outside 0..9.
DatasetPtr<ClassificationItem> load_digits(const std::filesystem::path& path);

}  // namespace kiln::data
