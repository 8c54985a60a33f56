// The autotune cache (runtime/autotune.h): a key is measured once and then remembered, in the
// process and on disk; a candidate replaces the heuristic only when it beats it by the margin;
// lines that do not parse are skipped; clear forgets everything; opaque structs round-trip as
// hex. Every test uses a cache file of its own, never the user's.
#include "runtime/autotune.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kiln::autotune {
namespace {

class AutotuneCache : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           (std::string("kiln_autotune_") + info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    path_ = (dir_ / "kiln" / "autotune.tsv").string();
    previous_ = cache_path();
    set_cache_path(path_);
  }
  void TearDown() override {
    set_cache_path(previous_);
    std::filesystem::remove_all(dir_);
  }
  std::string file_text() const {
    std::ifstream in(path_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  std::filesystem::path dir_;
  std::string path_, previous_;
};

// Candidate i takes times[i] seconds; counts the measurements.
struct Candidates {
  std::vector<double> times;
  int measured = 0;
  std::function<double(int)> seconds() {
    return [this](int i) {
      ++measured;
      return times[static_cast<std::size_t>(i)];
    };
  }
  static std::string name(int i) { return "candidate" + std::to_string(i); }
};

TEST_F(AutotuneCache, MeasuresOnceThenRemembers) {
  if (!enabled()) GTEST_SKIP() << "KILN_AUTOTUNE=0";
  Candidates c{{2e-3, 1e-3, 1.5e-3}};
  EXPECT_EQ(choose("op a", 3, c.seconds(), Candidates::name), "candidate1");
  EXPECT_EQ(c.measured, 3);
  EXPECT_EQ(choose("op a", 3, c.seconds(), Candidates::name), "candidate1");
  EXPECT_EQ(c.measured, 3) << "a remembered key is not measured again";
  const std::optional<Choice> known = find("op a");
  ASSERT_TRUE(known);
  EXPECT_EQ(known->choice, "candidate1");
  EXPECT_DOUBLE_EQ(known->heuristic_us, 2000);
  EXPECT_DOUBLE_EQ(known->chosen_us, 1000);
  EXPECT_NE(file_text().find("op a\tcandidate1\t"), std::string::npos) << file_text();
  // A fresh process (the table forgotten) reads the choice from the file.
  set_cache_path(path_);
  EXPECT_EQ(choose("op a", 3, c.seconds(), Candidates::name), "candidate1");
  EXPECT_EQ(c.measured, 3);
}

TEST_F(AutotuneCache, TheHeuristicStaysUnlessBeatenByTheMargin) {
  if (!enabled()) GTEST_SKIP() << "KILN_AUTOTUNE=0";
  Candidates close{{1.0, 0.99 * 1.0, 1.01}};
  EXPECT_EQ(choose("close", 3, close.seconds(), Candidates::name), "candidate0");
  Candidates clear_win{{1.0, 0.5, 0.96}};
  EXPECT_EQ(choose("clear", 3, clear_win.seconds(), Candidates::name), "candidate1");
  Candidates one{{1.0}};
  EXPECT_EQ(choose("one", 1, one.seconds(), Candidates::name), "candidate0");
  EXPECT_EQ(one.measured, 0) << "a single candidate needs no measurement";
  // measure() measures even a remembered key.
  Candidates again{{1.0, 2.0}};
  EXPECT_EQ(measure("clear", 2, again.seconds(), Candidates::name), "candidate0");
  EXPECT_EQ(again.measured, 2);
  EXPECT_EQ(find("clear")->choice, "candidate0");
}

TEST_F(AutotuneCache, SkipsLinesThatDoNotParseAndClearForgetsAll) {
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path());
  {
    std::ofstream out(path_);
    out << "good key\tchoice\t10\t5\n"
        << "too\tfew\tfields\n"
        << "bad number\tchoice\tten\t5\n"
        << "\tchoice\t1\t1\n";
  }
  set_cache_path(path_);
  const std::vector<Choice> all = entries();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0], (Choice{"good key", "choice", 10, 5}));
  // Keys or choices with tabs or newlines are refused (they would break the file).
  remember({"tab\tkey", "x", 1, 1});
  remember({"key", "new\nline", 1, 1});
  EXPECT_EQ(entries().size(), 1u);
  remember({"second", "y", 3, 2});
  EXPECT_EQ(entries().size(), 2u);
  clear();
  EXPECT_TRUE(entries().empty());
  EXPECT_FALSE(std::filesystem::exists(path_));
  EXPECT_FALSE(find("good key"));
}

TEST_F(AutotuneCache, ChoicesOfOtherProcessesAreKept) {
  remember({"mine", "a", 2, 1});
  {
    // Another process appends its own choice meanwhile.
    std::ofstream out(path_, std::ios::app);
    out << "theirs\tb\t4\t3\n";
  }
  remember({"mine too", "c", 2, 2});
  std::vector<std::string> keys;
  for (const Choice& c : entries()) keys.push_back(c.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"mine", "mine too", "theirs"}));
}

TEST(AutotuneHex, RoundTripsBytesAndRefusesOtherText) {
  const unsigned char bytes[] = {0x00, 0x7f, 0x80, 0xff, 0x12, 0xab};
  const std::string hex = to_hex(bytes, sizeof bytes);
  EXPECT_EQ(hex, "007f80ff12ab");
  unsigned char back[sizeof bytes] = {};
  ASSERT_TRUE(from_hex(hex, back, sizeof back));
  EXPECT_EQ(std::memcmp(back, bytes, sizeof bytes), 0);
  EXPECT_FALSE(from_hex("007f80ff12a", back, sizeof back));     // odd length
  EXPECT_FALSE(from_hex("007f80ff12abcd", back, sizeof back));  // another size
  EXPECT_FALSE(from_hex("007f80ff12aG", back, sizeof back));    // not a digit
  EXPECT_FALSE(from_hex("007F80FF12AB", back, sizeof back));    // upper case is not written
}

}  // namespace
}  // namespace kiln::autotune
