// The training loop: it learns, it logs, a run resumed from a checkpoint ends exactly where an
// uninterrupted run ends, and loader worker threads change nothing.
#include <gtest/gtest.h>
#include <kiln/data/classification.h>
#include <kiln/kiln.h>
#include <kiln/nn/nn.h>
#include <kiln/optim/optim.h>
#include <kiln/train/learner.h>

#include <filesystem>
#include <sstream>

#include "train/learner_test_util.h"

namespace kiln::train {
namespace {

using testing::blobs;
using testing::classify;
using testing::expect_same_parameters;
using testing::fresh_net;
using testing::kCpu;
using testing::Net;
using testing::run_dir;
using testing::train_for;
using testing::TrainingRun;

TEST(Learner, LearnsLogsAndCharts) {
  const auto dir = run_dir("learns");
  const TrainingRun run = train_for(4, dir, false);
  ASSERT_EQ(run.history.records().size(), 4u);
  const EpochRecord& last = run.history.records().back();
  EXPECT_GT(last.valid_accuracy, 0.95);
  EXPECT_LT(last.train_loss, run.history.records().front().train_loss);
  EXPECT_TRUE(std::filesystem::exists(dir / "log.csv"));
  EXPECT_TRUE(std::filesystem::exists(dir / "chart.svg"));
  EXPECT_TRUE(std::filesystem::exists(dir / "model-4.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir / "optimizer-3.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir / "model-2.safetensors")) << "old checkpoints go";
  EXPECT_EQ(History::read_csv(dir / "log.csv").records().size(), 4u);
  EXPECT_NE(run.output.find("epoch 4/4 valid loss "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("accuracy "), std::string::npos) << run.output;
  std::filesystem::remove_all(dir);
}

TEST(Learner, ResumedRunEndsWhereAnUninterruptedRunEnds) {
  const auto whole_dir = run_dir("whole");
  const TrainingRun whole = train_for(4, whole_dir, false);

  const auto split_dir = run_dir("split");
  train_for(2, split_dir, false);                             // "interrupted" after epoch 2
  const TrainingRun resumed = train_for(4, split_dir, true);  // picks up at epoch 3
  EXPECT_NE(resumed.output.find("resuming from epoch 2"), std::string::npos) << resumed.output;
  ASSERT_EQ(resumed.history.records().size(), 4u);

  expect_same_parameters(whole.model, resumed.model);
  for (std::size_t e = 0; e < 4; ++e) {
    EXPECT_EQ(whole.history.records()[e].train_loss, resumed.history.records()[e].train_loss) << e;
  }
  std::filesystem::remove_all(whole_dir);
  std::filesystem::remove_all(split_dir);
}

// Batches built ahead by worker threads (while the training thread runs the model and the
// optimizer) train exactly the model that batches built in line do.
TEST(Learner, LoaderWorkersTrainTheSameModel) {
  const auto inline_dir = run_dir("inline");
  const TrainingRun in_line = testing::train({.epochs = 3, .directory = inline_dir});
  const auto threaded_dir = run_dir("threaded");
  const TrainingRun threaded =
      testing::train({.epochs = 3, .directory = threaded_dir, .workers = 3});
  expect_same_parameters(in_line.model, threaded.model);
  ASSERT_EQ(in_line.history.records().size(), threaded.history.records().size());
  for (std::size_t e = 0; e < in_line.history.records().size(); ++e) {
    const EpochRecord& a = in_line.history.records()[e];
    const EpochRecord& b = threaded.history.records()[e];
    EXPECT_EQ(a.train_loss, b.train_loss) << "epoch " << e + 1;
    EXPECT_EQ(a.valid_loss, b.valid_loss) << "epoch " << e + 1;
  }
  std::filesystem::remove_all(inline_dir);
  std::filesystem::remove_all(threaded_dir);
}

// Mixed precision: the forward passes in bf16 or f16 (the scaler catching f16's overflows)
// learn the blobs as the f32 run does, and the parameters and optimizer state stay f32.
TEST(Learner, MixedPrecisionLearnsAndKeepsF32Parameters) {
  for (const DType precision : {DType::BF16, DType::F16}) {
    const TrainingRun run = testing::train({.epochs = 4, .precision = precision});
    const EpochRecord& last = run.history.records().back();
    EXPECT_GT(last.valid_accuracy, 0.95) << dtype_name(precision);
    EXPECT_LT(last.train_loss, run.history.records().front().train_loss) << dtype_name(precision);
    for (const nn::NamedParam& p : nn::named_parameters(run.model)) {
      EXPECT_EQ(p.value->dtype(), DType::F32) << p.name;
    }
  }
  std::ostringstream out;
  const data::ClassificationBatcher batcher(kCpu);
  const data::ClassificationLoader loader(blobs(8, 1), batcher, {.batch_size = 4});
  optim::Sgd sgd;
  EXPECT_THROW(fit(fresh_net(), sgd, optim::ConstantLr{0.1}, loader,
                   static_cast<const data::ClassificationLoader*>(nullptr), classify,
                   LearnerConfig{.epochs = 1,
                                 .precision = DType::F64,
                                 .progress = Progress::Style::Quiet,
                                 .out = &out}),
               InvalidArgument);
}

TEST(Learner, RejectsALossThatIsNotAScalar) {
  const data::ClassificationBatcher batcher(kCpu);
  const data::ClassificationLoader loader(blobs(8, 1), batcher, {.batch_size = 4});
  optim::Sgd sgd;
  std::ostringstream out;
  auto bad = [](const Net& m, const data::ClassificationBatch& b) {
    return StepOutput{m.forward(b.features).reshape<1>(Shape{-1}), 4, -1};
  };
  EXPECT_THROW(fit(fresh_net(), sgd, optim::ConstantLr{0.1}, loader,
                   static_cast<const data::ClassificationLoader*>(nullptr), bad,
                   LearnerConfig{.epochs = 1, .progress = Progress::Style::Quiet, .out = &out}),
               ShapeMismatch);
}

}  // namespace
}  // namespace kiln::train
