// The training log, its chart and the progress display.
#include <gtest/gtest.h>
#include <kiln/error.h>
#include <kiln/train/history.h>
#include <kiln/train/progress.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

namespace kiln::train {
namespace {

std::filesystem::path temp_dir() {
  auto dir =
      std::filesystem::temp_directory_path() / ("kiln_history_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

History sample() {
  History h;
  h.add({1, 2.0, 0.5, 2.5, 0.4, 0.1, 1.5});
  h.add({2, 1.0, 0.75, 1.25, kNotMeasured, 0.05, 1.25});
  h.add({3, 0.5, 0.875, 0.75, 0.9, 0.025, 1.0});
  return h;
}

TEST(History, CsvRoundTripKeepsEveryFieldAndMissingValues) {
  const auto path = temp_dir() / "log.csv";
  sample().write_csv(path);
  std::ifstream in(path);
  std::string header;
  std::getline(in, header);
  EXPECT_EQ(header,
            "epoch,train_loss,train_accuracy,valid_loss,valid_accuracy,learning_rate,seconds");
  std::string second;
  std::getline(in, second);
  EXPECT_EQ(second, "1,2,0.5,2.5,0.4,0.1,1.5");
  const History back = History::read_csv(path);
  ASSERT_EQ(back.records().size(), 3u);
  EXPECT_EQ(back.records()[1].epoch, 2);
  EXPECT_DOUBLE_EQ(back.records()[1].valid_loss, 1.25);
  EXPECT_TRUE(std::isnan(back.records()[1].valid_accuracy));
  EXPECT_DOUBLE_EQ(back.records()[2].seconds, 1.0);
}

TEST(History, TruncateDropsLaterEpochs) {
  History h = sample();
  h.truncate(2);
  ASSERT_EQ(h.records().size(), 2u);
  EXPECT_EQ(h.records().back().epoch, 2);
}

TEST(History, MalformedLogsNameFileAndLine) {
  const auto dir = temp_dir();
  {
    std::ofstream(dir / "bad_header.csv") << "a,b\n1,2\n";
    std::ofstream(dir / "bad_cell.csv")
        << "epoch,train_loss,train_accuracy,valid_loss,valid_accuracy,learning_rate,seconds\n"
        << "1,0.5,x,,,,\n";
    std::ofstream(dir / "short.csv")
        << "epoch,train_loss,train_accuracy,valid_loss,valid_accuracy,learning_rate,seconds\n1,2\n";
  }
  try {
    History::read_csv(dir / "bad_cell.csv");
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("bad_cell.csv:2: 'x' is not a number"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(History::read_csv(dir / "bad_header.csv"), InvalidArgument);
  EXPECT_THROW(History::read_csv(dir / "short.csv"), InvalidArgument);
  EXPECT_THROW(History::read_csv(dir / "missing.csv"), InvalidArgument);
}

// An epoch cell was cast from any double, undefined for 1e300 or NaN; it must be a whole number.
TEST(History, EpochCellsMustBeWholeNumbersFromOne) {
  const auto dir = temp_dir();
  const std::string header =
      "epoch,train_loss,train_accuracy,valid_loss,valid_accuracy,learning_rate,seconds\n";
  for (const char* epoch : {"1e300", "nan", "0", "-3", "2.5", "", "99999999999"}) {
    std::ofstream(dir / "epoch.csv") << header << epoch << ",1,,,,,\n";
    try {
      History::read_csv(dir / "epoch.csv");
      ADD_FAILURE() << "accepted epoch '" << epoch << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("epoch.csv:2: '" + std::string(epoch) +
                                           "' is not an epoch number"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(History, WriteFailuresNameThePathAndTheReason) {
  const auto nowhere = temp_dir() / "no_such_dir" / "log.csv";
  try {
    sample().write_csv(nowhere);
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("[History::write_csv] " + nowhere.string(), 0), 0u) << message;
    EXPECT_NE(message.find("No such file or directory"), std::string::npos) << message;
  }
  EXPECT_THROW(sample().write_svg(nowhere.parent_path() / "chart.svg"), InvalidArgument);
}

TEST(History, SvgDrawsOneLinePerMeasuredSeriesWithAPointPerEpoch) {
  const std::string svg = sample().svg();
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  const std::regex polyline("<polyline[^>]*points='([^']*)'");
  std::vector<int> counts;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), polyline);
       it != std::sregex_iterator(); ++it) {
    std::istringstream points((*it)[1].str());
    std::string p;
    int n = 0;
    while (points >> p) ++n;
    counts.push_back(n);
  }
  // train loss 3, valid loss 3, train accuracy 3, valid accuracy 2 (epoch 2 not measured).
  EXPECT_EQ(counts, (std::vector<int>{3, 3, 3, 2}));
  const auto path = temp_dir() / "chart.svg";
  sample().write_svg(path);
  EXPECT_GT(std::filesystem::file_size(path), 500u);
}

TEST(Progress, LinesShowStepLossRateAndEta) {
  std::ostringstream out;
  Progress progress(out, "epoch 1/2 train", 4, Progress::Style::Lines, 0.0);
  progress.update(32, 1.5);
  progress.update(32, 1.25);
  const std::string text = progress.status_text();
  EXPECT_NE(text.find("epoch 1/2 train 2/4 loss 1.2500"), std::string::npos) << text;
  EXPECT_NE(text.find("samples/s ETA "), std::string::npos) << text;
  progress.finish("loss 1.2500");
  const std::string all = out.str();
  EXPECT_NE(all.find("1/4 loss 1.5000"), std::string::npos) << all;
  EXPECT_NE(all.find("epoch 1/2 train loss 1.2500 ("), std::string::npos) << all;
  EXPECT_EQ(all.find('\r'), std::string::npos) << "no carriage returns off a terminal";
}

TEST(Progress, BarRedrawsInPlace) {
  std::ostringstream out;
  Progress progress(out, "train", 10, Progress::Style::Bar);
  for (int i = 0; i < 5; ++i) progress.update(8, 0.5);
  EXPECT_NE(progress.status_text().find("[============>           ] 5/10"), std::string::npos)
      << progress.status_text();
  const std::string all = out.str();
  EXPECT_EQ(std::count(all.begin(), all.end(), '\r'), 5);
  EXPECT_FALSE(Progress::is_terminal(out));
}

TEST(Progress, FormatsDurations) {
  EXPECT_EQ(Progress::format_duration(0), "00:00");
  EXPECT_EQ(Progress::format_duration(62.4), "01:02");
  EXPECT_EQ(Progress::format_duration(3723), "1:02:03");
  EXPECT_EQ(Progress::format_duration(std::nan("")), "--:--");
}

}  // namespace
}  // namespace kiln::train
