// The training loop: it learns, it logs, and a run resumed from a checkpoint ends exactly where
// an uninterrupted run ends.
#include <gtest/gtest.h>
#include <kiln/data/classification.h>
#include <kiln/kiln.h>
#include <kiln/nn/nn.h>
#include <kiln/optim/optim.h>
#include <kiln/train/learner.h>

#include <filesystem>
#include <random>
#include <sstream>

namespace kiln::train {
namespace {

const Device kCpu = Device::cpu();

struct Net {
  nn::Linear hidden, out;
  nn::Dropout dropout{.p = 0.2};
  KILN_MODULE(hidden, out)
  Tensor<2> forward(const Tensor<2>& x) const {
    return out.forward(dropout.forward(activation::relu(hidden.forward(x))));
  }
};

StepOutput classify(const Net& model, const data::ClassificationBatch& batch) {
  const Tensor<2> logits = model.forward(batch.features);
  return classification_step(nn::cross_entropy(logits, batch.labels), logits, batch.labels);
}

// Two well separated Gaussian blobs per class, 3 classes, 4 features.
data::DatasetPtr<data::ClassificationItem> blobs(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  std::vector<data::ClassificationItem> items;
  for (std::size_t i = 0; i < n; ++i) {
    const auto label = static_cast<std::int64_t>(i % 3);
    std::vector<float> x(4);
    for (std::size_t f = 0; f < 4; ++f) x[f] = (f == static_cast<std::size_t>(label) ? 2.0f : 0.0f) + noise(rng);
    items.push_back({std::move(x), label});
  }
  return data::in_memory(std::move(items));
}

Net fresh_net() {
  kCpu.seed(11);
  return Net{nn::LinearConfig{4, 16}.init(kCpu), nn::LinearConfig{16, 3}.init(kCpu)};
}

std::filesystem::path run_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("kiln_learner_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

struct TrainingRun {
  Net model;
  History history;
  std::string output;
};

TrainingRun train_for(int epochs, const std::filesystem::path& dir, bool resume) {
  const data::ClassificationBatcher batcher(kCpu);
  const data::ClassificationLoader train_loader(blobs(120, 1), batcher,
                                                {.batch_size = 16, .shuffle = true, .seed = 5});
  const data::ClassificationLoader valid_loader(blobs(30, 2), batcher, {.batch_size = 30});
  optim::Adam adam;
  std::ostringstream out;
  TrainingRun run;
  LearnerConfig config{.epochs = epochs, .directory = dir, .resume = resume, .seed = 3,
                       .progress = Progress::Style::Lines, .out = &out};
  run.model = fit(fresh_net(), adam, optim::CosineAnnealingLr{.base_lr = 0.02, .t_max = 40},
                  train_loader, &valid_loader, classify, config, &run.history);
  run.output = out.str();
  return run;
}

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
  train_for(2, split_dir, false);                // "interrupted" after epoch 2
  const TrainingRun resumed = train_for(4, split_dir, true);  // picks up at epoch 3
  EXPECT_NE(resumed.output.find("resuming from epoch 2"), std::string::npos) << resumed.output;
  ASSERT_EQ(resumed.history.records().size(), 4u);

  const auto a = nn::named_parameters(whole.model);
  const auto b = nn::named_parameters(resumed.model);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(kiln::detail::into_data(a[i].value).to_f64_vec(),
              kiln::detail::into_data(b[i].value).to_f64_vec())
        << a[i].name << " differs after resuming";
  }
  for (std::size_t e = 0; e < 4; ++e) {
    EXPECT_EQ(whole.history.records()[e].train_loss, resumed.history.records()[e].train_loss) << e;
  }
  std::filesystem::remove_all(whole_dir);
  std::filesystem::remove_all(split_dir);
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
