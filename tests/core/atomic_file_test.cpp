// AtomicFile: a target holds the old content or the whole new one, never a part; temporaries
// are unique, never follow a planted link, and are gone after any failure.
#include "core/atomic_file.h"

#include <gtest/gtest.h>
#include <kiln/error.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace kiln::detail {
namespace {

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           (std::string("kiln_atomic_") + info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::set<std::string> names() const {
    std::set<std::string> out;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      out.insert(entry.path().filename().string());
    }
    return out;
  }

  std::filesystem::path dir_;
};

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_plain(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

template <class F>
std::string message_of(F&& call) {
  try {
    call();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected InvalidArgument";
  return "";
}

TEST_F(AtomicFileTest, WritesTheWholeContentAndLeavesNothingElse) {
  const auto target = dir_ / "out.txt";
  write_file_atomically(target, "first", "test");
  EXPECT_EQ(read(target), "first");
  AtomicFile file(target, "test");
  file.write(std::string_view("sec"));
  file.write(std::as_bytes(std::span<const char>("ond", 3)));
  EXPECT_EQ(read(target), "first") << "the target changes only at commit";
  EXPECT_EQ(file.temporary().parent_path(), dir_) << "the temporary lies beside the target";
  file.commit();
  EXPECT_EQ(read(target), "second");
  EXPECT_EQ(names(), std::set<std::string>{"out.txt"});
  write_file_atomically(target, "", "test");
  EXPECT_EQ(std::filesystem::file_size(target), 0u) << "an empty content is a file too";
}

TEST_F(AtomicFileTest, RelativeTargetsUseTheWorkingDirectory) {
  const auto previous = std::filesystem::current_path();
  std::filesystem::current_path(dir_);
  write_file_atomically("plain.txt", "here", "test");
  std::filesystem::current_path(previous);
  EXPECT_EQ(read(dir_ / "plain.txt"), "here");
}

TEST_F(AtomicFileTest, ModeIsAnOrdinaryNewFilesLessTheUmask) {
  const mode_t mask = ::umask(027);
  write_file_atomically(dir_ / "moded", "x", "test");
  ::umask(mask);
  struct stat info {};
  ASSERT_EQ(::stat((dir_ / "moded").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0640u);
}

TEST_F(AtomicFileTest, AbandonedWithoutCommitLeavesTheTargetAndNoTemporary) {
  const auto target = dir_ / "kept";
  write_plain(target, "old");
  {
    AtomicFile file(target, "test");
    file.write(std::string_view("new content"));
    EXPECT_TRUE(std::filesystem::exists(file.temporary()));
  }
  EXPECT_EQ(read(target), "old");
  EXPECT_EQ(names(), std::set<std::string>{"kept"});
}

TEST_F(AtomicFileTest, NeverFollowsALinkPlantedAtATemporaryName) {
  // The old writer used target + ".partial"; a link there made a save overwrite its target.
  const auto victim = dir_ / "victim";
  write_plain(victim, "precious");
  const auto target = dir_ / "model.safetensors";
  for (const char* suffix : {".partial", ".tmp"}) {
    std::filesystem::create_symlink(victim, target.string() + suffix);
  }
  for (int i = 0; i < 50; ++i)
    write_file_atomically(target, "content " + std::to_string(i), "test");
  EXPECT_EQ(read(victim), "precious");
  EXPECT_EQ(read(target), "content 49");
  EXPECT_EQ(names().size(), 4u) << "victim, target and the two links; no temporaries";
}

TEST_F(AtomicFileTest, ALinkAtTheTargetIsReplacedNotWrittenThrough) {
  const auto victim = dir_ / "victim";
  write_plain(victim, "precious");
  const auto target = dir_ / "link";
  std::filesystem::create_symlink(victim, target);
  write_file_atomically(target, "new", "test");
  EXPECT_EQ(read(victim), "precious");
  EXPECT_FALSE(std::filesystem::is_symlink(target));
  EXPECT_EQ(read(target), "new");
}

TEST_F(AtomicFileTest, FailuresNameThePathAndTheReasonAndLeaveNoTemporary) {
  const std::string missing =
      message_of([&] { write_file_atomically(dir_ / "no" / "such" / "file", "x", "save_thing"); });
  const std::string expected = "[save_thing] " + (dir_ / "no" / "such" / "file").string() +
                               ": cannot create a temporary file in " +
                               (dir_ / "no" / "such").string() + ": No such file or directory";
  EXPECT_EQ(missing, expected);

  // A directory at the target: the rename fails after everything was written.
  std::filesystem::create_directories(dir_ / "occupied" / "inside");
  const std::string occupied =
      message_of([&] { write_file_atomically(dir_ / "occupied", "x", "save_thing"); });
  EXPECT_NE(occupied.find("cannot rename"), std::string::npos) << occupied;
  EXPECT_NE(occupied.find("directory"), std::string::npos) << occupied;
  EXPECT_EQ(names(), std::set<std::string>{"occupied"}) << "the temporary was removed";

  // A file where the directory should be.
  write_plain(dir_ / "plain", "x");
  const std::string under_file =
      message_of([&] { write_file_atomically(dir_ / "plain" / "child", "x", "save_thing"); });
  EXPECT_NE(under_file.find("Not a directory"), std::string::npos) << under_file;

  const std::string no_name = message_of([&] { write_file_atomically(dir_ / "", "x", "op"); });
  EXPECT_NE(no_name.find("not a file path"), std::string::npos) << no_name;
}

TEST_F(AtomicFileTest, UseAfterCommitIsAnError) {
  AtomicFile file(dir_ / "once", "test");
  file.commit();
  EXPECT_THROW(file.write(std::string_view("late")), InvalidArgument);
  EXPECT_THROW(file.commit(), InvalidArgument);
}

TEST_F(AtomicFileTest, LongNamesStillGetATemporary) {
  const std::string name(250, 'n');
  write_file_atomically(dir_ / name, "long", "test");
  EXPECT_EQ(read(dir_ / name), "long");
}

// Writers racing on one target: after every round the file is one writer's whole content.
TEST_F(AtomicFileTest, ConcurrentWritersEachLeaveAWholeFile) {
  const auto target = dir_ / "shared";
  constexpr int kThreads = 4;
  constexpr int kRounds = 60;
  std::vector<std::string> contents;
  for (int t = 0; t < kThreads; ++t) {
    contents.push_back(std::string(40'000 + 997 * t, static_cast<char>('a' + t)));
  }
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        try {
          write_file_atomically(target, contents[static_cast<std::size_t>(t)], "test");
        } catch (...) {
          ++failures;
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    ASSERT_EQ(failures.load(), 0);
    const std::string now = read(target);
    ASSERT_TRUE(std::find(contents.begin(), contents.end(), now) != contents.end())
        << "round " << round << ": " << now.size() << " bytes, not one writer's content";
  }
  EXPECT_EQ(names(), std::set<std::string>{"shared"});
}

}  // namespace
}  // namespace kiln::detail
