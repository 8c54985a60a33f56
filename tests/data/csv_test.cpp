// The CSV reader (RFC 4180 quoting, line endings, error positions) and CsvDataset.
#include <gtest/gtest.h>
#include <kiln/data/csv.h>

#include <cmath>
#include <string>

#include "data/temp_files.h"

namespace kiln::data {
namespace {

// The message of the CsvError that fn throws ("" and a test failure if none).
template <class Fn>
std::string csv_error(Fn fn) {
  try {
    fn();
  } catch (const CsvError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a CsvError: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no exception";
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(DataCsv, ParsesNumbersRowMajorWithLines) {
  const CsvTable t = parse_csv("1,2.5,-3\n4e2, 5 ,+6\n", "t.csv");
  EXPECT_EQ(t.source, "t.csv");
  EXPECT_TRUE(t.header.empty());
  ASSERT_EQ(t.num_columns, 3u);
  ASSERT_EQ(t.num_rows(), 2u);
  EXPECT_EQ(t.values, (std::vector<double>{1, 2.5, -3, 400, 5, 6}));
  EXPECT_EQ(t.lines, (std::vector<std::size_t>{1, 2}));
  EXPECT_EQ(t.at(1, 2), 6);
}

TEST(DataCsv, HeaderNamesColumns) {
  const CsvTable t = parse_csv("x, y ,label\n1,2,0\n", "h.csv", {.has_header = true});
  EXPECT_EQ(t.header, (std::vector<std::string>{"x", "y", "label"}));
  EXPECT_EQ(t.column("y"), 1u);
  EXPECT_EQ(t.num_rows(), 1u);
  EXPECT_EQ(t.lines.front(), 2u);
  try {
    t.column("z");
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "\"z\"")) << e.what();
    EXPECT_TRUE(contains(e.what(), "\"label\"")) << e.what();
  }
  EXPECT_THROW(parse_csv("1,2\n", "n.csv").column("x"), InvalidArgument);
  // A header and no rows is an empty table; no header at all is an error.
  EXPECT_EQ(parse_csv("a,b\n", "e.csv", {.has_header = true}).num_rows(), 0u);
  EXPECT_TRUE(contains(csv_error([] { parse_csv("\n\n", "e.csv", {.has_header = true}); }),
                       "e.csv: no header"));
  EXPECT_EQ(parse_csv("", "e.csv").num_rows(), 0u);
}

TEST(DataCsv, QuotedFieldsFollowRfc4180) {
  // A quoted header name with a delimiter, doubled quotes and a line break; quoted numbers.
  const std::string text =
      "\"a,\"\"b\"\"\",\"multi\nline\"\n"
      "\"1.5\",\" 2 \"\n"
      "3,\"4\"\n";
  const CsvTable t = parse_csv(text, "q.csv", {.has_header = true});
  EXPECT_EQ(t.header, (std::vector<std::string>{"a,\"b\"", "multi\nline"}));
  EXPECT_EQ(t.values, (std::vector<double>{1.5, 2, 3, 4}));
  // The header spans lines 1-2, so the rows start on lines 3 and 4.
  EXPECT_EQ(t.lines, (std::vector<std::size_t>{3, 4}));
  // An empty quoted field is an empty cell, not a blank line.
  EXPECT_TRUE(
      contains(csv_error([] { parse_csv("1\n\"\"\n", "q.csv"); }), "q.csv:2: column 0 is empty"));
}

TEST(DataCsv, LineEndingsBomAndBlankLines) {
  const CsvTable t =
      parse_csv("\xEF\xBB\xBFv,w\r\n\r\n1,2\r\n\n  \n3,4", "b.csv", {.has_header = true});
  EXPECT_EQ(t.header, (std::vector<std::string>{"v", "w"}));
  EXPECT_EQ(t.values, (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(t.lines, (std::vector<std::size_t>{3, 6}));
  // Old Mac line ends (CR alone) also end a record.
  EXPECT_EQ(parse_csv("1\r2\r", "cr.csv").values, (std::vector<double>{1, 2}));
}

TEST(DataCsv, OtherDelimiters) {
  EXPECT_EQ(parse_csv("1;2\n3;4\n", "s.csv", {.delimiter = ';'}).values,
            (std::vector<double>{1, 2, 3, 4}));
  const CsvTable tabs = parse_csv("1\t 2\n\"3\"\t4\n", "t.tsv", {.delimiter = '\t'});
  EXPECT_EQ(tabs.num_columns, 2u);
  EXPECT_EQ(tabs.values, (std::vector<double>{1, 2, 3, 4}));
  EXPECT_THROW(parse_csv("1\n", "d.csv", {.delimiter = '"'}), InvalidArgument);
  EXPECT_THROW(parse_csv("1\n", "d.csv", {.delimiter = '\n'}), InvalidArgument);
}

TEST(DataCsv, SpecialValues) {
  const CsvTable t = parse_csv("nan,inf,-inf,1e-3,.5\n", "s.csv");
  EXPECT_TRUE(std::isnan(t.values[0]));
  EXPECT_EQ(t.values[1], INFINITY);
  EXPECT_EQ(t.values[2], -INFINITY);
  EXPECT_DOUBLE_EQ(t.values[3], 0.001);
  EXPECT_EQ(t.values[4], 0.5);
}

TEST(DataCsv, MalformedRowsNameFileAndLine) {
  std::string m = csv_error([] { parse_csv("1,2,3\n4,5,6\n\n7,8\n", "rows.csv"); });
  EXPECT_TRUE(contains(m, "rows.csv:4: expected 3 fields (as on line 1), found 2")) << m;

  m = csv_error([] { parse_csv("a,b\n1,2\n3,abc\n", "cells.csv", {.has_header = true}); });
  EXPECT_TRUE(contains(m, "cells.csv:3: column 1 (\"b\"): \"abc\" is not a number")) << m;

  m = csv_error([] { parse_csv("1,2\n3,\n", "empty.csv"); });
  EXPECT_TRUE(contains(m, "empty.csv:2: column 1 is empty")) << m;

  m = csv_error([] { parse_csv("1,2\n3,4x\n", "junk.csv"); });
  EXPECT_TRUE(contains(m, "junk.csv:2: column 1: \"4x\" is not a number")) << m;

  m = csv_error([] { parse_csv("1,2\n3,\"4\n5,6\n", "open.csv"); });
  EXPECT_TRUE(contains(m, "open.csv:2: a quoted field is never closed")) << m;

  m = csv_error([] { parse_csv("1,\"2\"x\n", "after.csv"); });
  EXPECT_TRUE(contains(m, "after.csv:1: unexpected \"x\" after a closing quote")) << m;

  m = csv_error([] { parse_csv("1,2\n3,4\"\n", "inner.csv"); });
  EXPECT_TRUE(contains(m, "inner.csv:2: a quote inside an unquoted field")) << m;

  m = csv_error([] { parse_csv("1e999\n", "big.csv"); });
  EXPECT_TRUE(contains(m, "big.csv:1: column 0: \"1e999\" is out of the range of a double")) << m;

  // Errors are kiln errors.
  EXPECT_THROW(parse_csv("x\n", "k.csv"), Error);
}

TEST(DataCsv, ReadsFilesAndReportsUnreadableOnes) {
  testing::TempDir dir;
  const auto path = dir.write("table.csv", "f,g\n1,2\n3,4\n");
  const CsvTable t = read_csv(path, {.has_header = true});
  EXPECT_EQ(t.source, path.string());
  EXPECT_EQ(t.values, (std::vector<double>{1, 2, 3, 4}));

  const auto bad = dir.write("bad.csv", "1,2\n3\n");
  std::string m = csv_error([&] { read_csv(bad); });
  EXPECT_TRUE(contains(m, "[read_csv] " + bad.string() + ":2: expected 2 fields")) << m;

  m = csv_error([&] { read_csv(dir.path() / "missing.csv"); });
  EXPECT_TRUE(contains(m, "cannot open " + (dir.path() / "missing.csv").string())) << m;
  m = csv_error([&] { read_csv(dir.path()); });
  EXPECT_TRUE(contains(m, "is a directory")) << m;
}

TEST(DataCsvDataset, LabelDefaultsToTheLastColumn) {
  testing::TempDir dir;
  const auto path = dir.write("d.csv", "0.5,1,2\n-1,3.25,0\n");
  const CsvDataset ds(path);
  ASSERT_EQ(ds.size(), 2u);
  EXPECT_EQ(ds.num_features(), 2u);
  EXPECT_EQ(ds.label_column(), 2u);
  EXPECT_EQ(ds.get(0), (ClassificationItem{{0.5f, 1.f}, 2}));
  EXPECT_EQ(ds.get(1), (ClassificationItem{{-1.f, 3.25f}, 0}));
  EXPECT_THROW(ds.get(2), InvalidArgument);
}

TEST(DataCsvDataset, ColumnsByNameAndIndex) {
  const CsvTable t =
      parse_csv("id,label,a,b\n7,1,10,20\n8,0,30,40\n", "n.csv", {.has_header = true});
  const CsvDataset by_name(t, {.label = "label", .features = {"b", "a"}});
  EXPECT_EQ(by_name.feature_columns(), (std::vector<std::size_t>{3, 2}));
  EXPECT_EQ(by_name.get(1), (ClassificationItem{{40.f, 30.f}, 0}));

  const CsvDataset by_index(t, {.label = 1, .features = {-1, 0}});
  EXPECT_EQ(by_index.get(0), (ClassificationItem{{20.f, 7.f}, 1}));

  const CsvDataset rest(t, {.label = 0});  // every other column, in file order
  EXPECT_EQ(rest.get(0), (ClassificationItem{{1.f, 10.f, 20.f}, 7}));

  EXPECT_THROW(CsvDataset(t, {.label = 4}), InvalidArgument);
  EXPECT_THROW(CsvDataset(t, {.label = -5}), InvalidArgument);
  EXPECT_THROW(CsvDataset(t, {.label = "nope"}), InvalidArgument);
  EXPECT_THROW(CsvDataset(parse_csv("1\n2\n", "one.csv"), {}), InvalidArgument);
}

TEST(DataCsvDataset, NonIntegerLabelsNameTheLine) {
  const CsvTable t = parse_csv("1,0\n\n2,1.5\n", "labels.csv");
  const std::string m = csv_error([&] { CsvDataset(t, {}); });
  EXPECT_TRUE(contains(m, "labels.csv:3: label column 1 holds 1.5, which is not an integer")) << m;
  EXPECT_THROW(CsvDataset(parse_csv("1,nan\n", "nan.csv"), {}), CsvError);
}

}  // namespace
}  // namespace kiln::data
