// Resuming a run directory: refused under another configuration (the seed also picks the data
// split, so a silent resume contaminated the test accuracy), extended by more epochs, and
// falling back to the previous checkpoint when the newest is damaged.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "train/learner_test_util.h"

namespace kiln::train {
namespace {

using testing::expect_same_parameters;
using testing::run_dir;
using testing::train;
using testing::TrainingRun;

// The message of the InvalidArgument that training under options throws.
std::string refusal(const testing::RunOptions& options) {
  try {
    train(options);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "the run was not refused";
  return "";
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "expected: " << part << "\nin: " << text;
}

// Flips one byte of a file, by default its last (a data byte of the last tensor).
void flip_byte(const std::filesystem::path& path, std::int64_t from_end = 1) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(-from_end, std::ios::end);
  char byte = 0;
  file.read(&byte, 1);
  file.seekp(-from_end, std::ios::end);
  byte = static_cast<char>(byte ^ 0x10);
  file.write(&byte, 1);
  ASSERT_TRUE(file.good()) << path;
}

class Resume : public ::testing::Test {
 protected:
  void TearDown() override { std::filesystem::remove_all(dir_); }
  const std::filesystem::path dir_ =
      run_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
};

TEST_F(Resume, ASeedChangeIsRefusedNamingBothSeeds) {
  train({.epochs = 2, .directory = dir_, .seed = 1});
  const std::string message = refusal({.epochs = 2, .directory = dir_, .seed = 2});
  EXPECT_EQ(message.rfind("[train::fit] " + dir_.string() +
                              " holds a run with another "
                              "configuration: seed 2 here but 1 in the run",
                          0),
            0u)
      << message;
  expect_contains(message, "resume = false (kiln train: --fresh)");
  EXPECT_TRUE(std::filesystem::exists(dir_ / "model-2.safetensors")) << "nothing was removed";
  const TrainingRun same_seed = train({.epochs = 2, .directory = dir_, .seed = 1});
  expect_contains(same_seed.output, "resuming from epoch 2");
}

TEST_F(Resume, EverySettingThatDiffersIsNamed) {
  train({.epochs = 1, .directory = dir_, .settings = {{"lr", "0.02"}, {"batch_size", "16"}}});
  const std::string message =
      refusal({.epochs = 1, .directory = dir_, .settings = {{"lr", "0.05"}, {"data", "crc"}}});
  expect_contains(message, "batch_size absent here but 16 in the run");
  expect_contains(message, "data crc here but absent in the run");
  expect_contains(message, "lr 0.05 here but 0.02 in the run");
  EXPECT_EQ(message.find("seed"), std::string::npos) << "the seed did not change: " << message;
}

TEST_F(Resume, AnotherModelIsRefused) {
  train({.epochs = 1, .directory = dir_});
  const data::ClassificationBatcher batcher(testing::kCpu);
  const data::ClassificationLoader loader(testing::blobs(12, 1), batcher, {.batch_size = 4});
  testing::kCpu.seed(1);
  testing::Net wider{nn::LinearConfig{4, 32}.init(testing::kCpu),
                     nn::LinearConfig{32, 3}.init(testing::kCpu)};
  optim::Adam adam;
  std::ostringstream out;
  try {
    fit(wider, adam, optim::ConstantLr{0.01}, loader,
        static_cast<const data::ClassificationLoader*>(nullptr), testing::classify,
        LearnerConfig{.epochs = 2,
                      .directory = dir_,
                      .seed = 3,
                      .progress = Progress::Style::Quiet,
                      .out = &out});
    FAIL() << "a run of another model resumed";
  } catch (const InvalidArgument& e) {
    expect_contains(e.what(), "parameters 4 tensors of 259 values");
    expect_contains(e.what(), "but 4 tensors of 131 values");
  }
}

TEST_F(Resume, MoreEpochsExtendTheRunAndFewerAreRefused) {
  const TrainingRun whole =
      train({.epochs = 4, .directory = run_dir("extend_whole"), .resume = false});
  std::filesystem::remove_all(run_dir("extend_whole"));
  train({.epochs = 2, .directory = dir_});
  const TrainingRun extended = train({.epochs = 4, .directory = dir_});
  expect_contains(extended.output, "resuming from epoch 2");
  expect_contains(extended.output, "extending the run from 2 to 4 epochs");
  ASSERT_EQ(extended.history.records().size(), 4u);
  expect_same_parameters(whole.model, extended.model);

  // The record now says 4 epochs: a run of 3 would stop short of what it holds.
  const std::string message = refusal({.epochs = 3, .directory = dir_});
  expect_contains(message, "epochs 3 here but 4 in the run (a run can be extended, not shortened)");
}

TEST_F(Resume, AFlippedDataByteFallsBackToThePreviousCheckpoint) {
  const TrainingRun whole =
      train({.epochs = 4, .directory = run_dir("flip_whole"), .resume = false});
  std::filesystem::remove_all(run_dir("flip_whole"));
  train({.epochs = 3, .directory = dir_});  // keeps the checkpoints of epochs 2 and 3
  flip_byte(dir_ / "model-3.safetensors");
  const TrainingRun resumed = train({.epochs = 4, .directory = dir_});
  expect_contains(resumed.output, "warning: the checkpoint of epoch 3 is unusable: [train::fit] " +
                                      (dir_ / "model-3.safetensors").string() +
                                      ": its tensors give crc32c:");
  expect_contains(resumed.output, "(the file is corrupt)");
  expect_contains(resumed.output, "resuming from epoch 2");
  // Epochs 3 and 4 are trained again from epoch 2, exactly as the first time.
  expect_same_parameters(whole.model, resumed.model);
  ASSERT_EQ(resumed.history.records().size(), 4u);
  EXPECT_EQ(resumed.history.records()[2].train_loss, whole.history.records()[2].train_loss);
}

TEST_F(Resume, ADamagedOptimizerFileOrAFileWithoutChecksumFallsBackToo) {
  train({.epochs = 3, .directory = dir_});
  flip_byte(dir_ / "optimizer-3.safetensors", 5);
  expect_contains(train({.epochs = 3, .directory = dir_}).output, "resuming from epoch 2");

  // The fallback re-trained epoch 3; replace its model with a file that has no checksum.
  record::save_safetensors(dir_ / "model-3.safetensors",
                           record::load_safetensors(dir_ / "model-3.safetensors"));
  const TrainingRun resumed = train({.epochs = 3, .directory = dir_});
  expect_contains(resumed.output, "no kiln.checksum in its metadata");
  expect_contains(resumed.output, "resuming from epoch 2");
}

TEST_F(Resume, NoUsableCheckpointIsAClearError) {
  train({.epochs = 3, .directory = dir_});
  flip_byte(dir_ / "model-3.safetensors");
  // A header byte: "{" becomes "k", no longer JSON.
  flip_byte(
      dir_ / "model-2.safetensors",
      static_cast<std::int64_t>(std::filesystem::file_size(dir_ / "model-2.safetensors")) - 8);
  const std::string message = refusal({.epochs = 4, .directory = dir_});
  EXPECT_EQ(
      message.rfind("[train::fit] no usable checkpoint in " + dir_.string() + ": epoch 3: ", 0), 0u)
      << message;
  expect_contains(message, "(the file is corrupt); epoch 2: [load_safetensors] ");
  expect_contains(message, "the header is not valid JSON");
  expect_contains(message, "start over with LearnerConfig::resume = false");
}

TEST_F(Resume, FreshStartsOverWithTheNewConfiguration) {
  train({.epochs = 3, .directory = dir_, .seed = 1});
  const TrainingRun fresh = train({.epochs = 1, .directory = dir_, .resume = false, .seed = 2});
  EXPECT_EQ(fresh.output.find("resuming"), std::string::npos) << fresh.output;
  EXPECT_TRUE(std::filesystem::exists(dir_ / "model-1.safetensors"));
  for (const char* old :
       {"model-2.safetensors", "model-3.safetensors", "optimizer-3.safetensors"}) {
    EXPECT_FALSE(std::filesystem::exists(dir_ / old)) << old << " of the old run is still there";
  }
  EXPECT_EQ(History::read_csv(dir_ / "log.csv").records().size(), 1u);
  // The directory now belongs to the seed-2 run.
  expect_contains(train({.epochs = 2, .directory = dir_, .seed = 2}).output,
                  "resuming from epoch 1");
  expect_contains(refusal({.epochs = 2, .directory = dir_, .seed = 1}),
                  "seed 1 here but 2 in the run");
}

TEST_F(Resume, ADirectoryWithoutItsConfigurationIsRefused) {
  train({.epochs = 1, .directory = dir_});
  std::filesystem::remove(dir_ / "run.json");
  const std::string message = refusal({.epochs = 1, .directory = dir_});
  expect_contains(message, (dir_ / "run.json").string() + ": cannot read the run's configuration");
  expect_contains(message, "kiln train: --fresh");

  std::ofstream(dir_ / "run.json") << "{\"format\": \"something else\"}";
  expect_contains(refusal({.epochs = 1, .directory = dir_}), "not a kiln run record");
}

TEST_F(Resume, AChangedNoteIsMentionedNotRefused) {
  train({.epochs = 1, .directory = dir_, .notes = {{"data_path", "/old/digits.csv"}}});
  const TrainingRun moved =
      train({.epochs = 2, .directory = dir_, .notes = {{"data_path", "/new/digits.csv"}}});
  expect_contains(moved.output,
                  "note: data_path /new/digits.csv here but /old/digits.csv in the run");
  expect_contains(moved.output, "resuming from epoch 1");
}

TEST_F(Resume, BadConfigurationsAreRefusedBeforeAnyFileIsWritten) {
  expect_contains(refusal({.epochs = 0, .directory = dir_}), "epochs must be at least 1, got 0");
  expect_contains(refusal({.epochs = -1, .directory = dir_}), "got -1");
  expect_contains(refusal({.epochs = 1, .directory = dir_, .settings = {{"seed", "9"}}}),
                  "LearnerConfig::settings cannot use the key 'seed'");
  EXPECT_FALSE(std::filesystem::exists(dir_)) << "refused before the directory was made";

  // A run directory that is a file, or lies under one.
  std::filesystem::create_directories(dir_);
  std::ofstream(dir_ / "file") << "x";
  expect_contains(refusal({.epochs = 1, .directory = dir_ / "file"}),
                  "cannot create the run directory " + (dir_ / "file").string());
  expect_contains(refusal({.epochs = 1, .directory = dir_ / "file" / "sub"}),
                  "cannot create the run directory");
}

}  // namespace
}  // namespace kiln::train
