// The shipped digits data: its size and class counts, and load_digits against a plain reading.
#include <gtest/gtest.h>
#include <kiln/data/csv.h>
#include <kiln/data/digits.h>

#include <array>
#include <fstream>
#include <sstream>
#include <string>

#include "data/temp_files.h"

namespace kiln::data {
namespace {

const std::filesystem::path kDigits =
    std::filesystem::path(KILN_SOURCE_DIR) / "data/digits/digits.csv";

// The file read with getline and stoi, independent of kiln's CSV reader.
std::vector<std::vector<int>> plain_rows() {
  std::ifstream in(kDigits);
  std::vector<std::vector<int>> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<int> row;
    std::stringstream fields(line);
    std::string field;
    while (std::getline(fields, field, ',')) row.push_back(std::stoi(field));
    rows.push_back(row);
  }
  return rows;
}

TEST(DataDigits, FileHasTheKnownShapeRangesAndClassCounts) {
  const auto rows = plain_rows();
  ASSERT_EQ(rows.size(), 1797u);
  std::array<int, 10> counts{};
  int sixteens = 0;
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 65u);
    for (std::size_t p = 0; p < 64; ++p) {
      ASSERT_GE(row[p], 0);
      ASSERT_LE(row[p], 16);
      sixteens += row[p] == 16;
    }
    ASSERT_GE(row[64], 0);
    ASSERT_LE(row[64], 9);
    ++counts[static_cast<std::size_t>(row[64])];
  }
  EXPECT_EQ(counts, (std::array<int, 10>{178, 182, 177, 183, 181, 182, 181, 179, 174, 180}));
  EXPECT_GT(sixteens, 0);

  // kiln's reader sees the same numbers.
  const CsvTable table = read_csv(kDigits);
  ASSERT_EQ(table.num_rows(), 1797u);
  ASSERT_EQ(table.num_columns, 65u);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t c = 0; c < 65; ++c) ASSERT_EQ(table.at(r, c), rows[r][c]) << r << "," << c;
  }
}

TEST(DataDigits, LoadScalesPixelsBySixteen) {
  const auto rows = plain_rows();
  const auto digits = load_digits(kDigits);
  ASSERT_EQ(digits->size(), 1797u);
  for (std::size_t i = 0; i < digits->size(); ++i) {
    const ClassificationItem item = digits->get(i);
    ASSERT_EQ(item.features.size(), 64u);
    EXPECT_EQ(item.label, rows[i][64]);
    for (std::size_t p = 0; p < 64; ++p) {
      ASSERT_EQ(item.features[p], static_cast<float>(rows[i][p] / 16.0)) << i << "," << p;
      ASSERT_GE(item.features[p], 0.f);
      ASSERT_LE(item.features[p], 1.f);
    }
  }
}

TEST(DataDigits, RejectsFilesThatAreNotDigits) {
  testing::TempDir dir;
  const std::string zeros63 = [] {
    std::string s;
    for (int i = 0; i < 63; ++i) s += "0,";
    return s;
  }();
  auto message = [&](const std::string& name, const std::string& content) -> std::string {
    const auto path = dir.write(name, content);
    try {
      load_digits(path);
    } catch (const CsvError& e) {
      return e.what();
    }
    return "no CsvError";
  };
  EXPECT_EQ(message("ok.csv", zeros63 + "16,9\n"), "no CsvError");  // a well-formed row loads
  EXPECT_EQ(load_digits(dir.path() / "ok.csv")->get(0).features[63], 1.0f);

  std::string m = message("narrow.csv", zeros63 + "0\n");
  EXPECT_NE(m.find("narrow.csv:1: expected 65 columns"), std::string::npos) << m;
  m = message("pixel.csv", zeros63 + "0,1\n" + zeros63 + "17,1\n");
  EXPECT_NE(m.find("pixel.csv:2: pixel 63 is 17, not an integer in 0..16"), std::string::npos) << m;
  m = message("frac.csv", zeros63 + "2.5,1\n");
  EXPECT_NE(m.find("frac.csv:1: pixel 63 is 2.5"), std::string::npos) << m;
  m = message("label.csv", zeros63 + "0,10\n");
  EXPECT_NE(m.find("label.csv:1: label 10 is not a digit 0..9"), std::string::npos) << m;
  m = message("empty.csv", "");
  EXPECT_NE(m.find("holds no rows"), std::string::npos) << m;
}

}  // namespace
}  // namespace kiln::data
