// The small classifier and data the learner tests train, and a run of it in a directory.
#pragma once

#include <gtest/gtest.h>
#include <kiln/data/classification.h>
#include <kiln/kiln.h>
#include <kiln/nn/nn.h>
#include <kiln/optim/optim.h>
#include <kiln/train/learner.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <random>
#include <sstream>
#include <string>

#include "support/devices.h"

namespace kiln::train::testing {

using kiln::test::kCpu;

struct Net {
  nn::Linear hidden, out;
  nn::Dropout dropout{.p = 0.2};
  KILN_MODULE(hidden, out)
  Tensor<2> forward(const Tensor<2>& x) const {
    return out.forward(dropout.forward(activation::relu(hidden.forward(x))));
  }
};

inline StepOutput classify(const Net& model, const data::ClassificationBatch& batch) {
  const Tensor<2> logits = model.forward(batch.features);
  return classification_step(nn::cross_entropy(logits, batch.labels), logits, batch.labels);
}

// Two well separated Gaussian blobs per class, 3 classes, 4 features.
inline data::DatasetPtr<data::ClassificationItem> blobs(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  std::vector<data::ClassificationItem> items;
  for (std::size_t i = 0; i < n; ++i) {
    const auto label = static_cast<std::int64_t>(i % 3);
    std::vector<float> x(4);
    for (std::size_t f = 0; f < 4; ++f)
      x[f] = (f == static_cast<std::size_t>(label) ? 2.0f : 0.0f) + noise(rng);
    items.push_back({std::move(x), label});
  }
  return data::in_memory(std::move(items));
}

inline Net fresh_net() {
  kCpu.seed(11);
  return Net{nn::LinearConfig{4, 16}.init(kCpu), nn::LinearConfig{16, 3}.init(kCpu)};
}

inline std::filesystem::path run_dir(const std::string& name) {
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

// A run of the test network in dir; everything a test varies is here.
struct RunOptions {
  int epochs = 4;
  std::filesystem::path directory;
  bool resume = true;
  std::uint64_t seed = 3;
  std::map<std::string, std::string> settings = {};
  std::map<std::string, std::string> notes = {};
  std::size_t workers = 0;  // the loaders' worker threads (0: batches built on the training thread)
  DType precision = DType::F32;
};

inline TrainingRun train(const RunOptions& options) {
  const data::ClassificationBatcher batcher(kCpu);
  const data::ClassificationLoader train_loader(
      blobs(120, 1), batcher,
      {.batch_size = 16, .shuffle = true, .seed = 5, .num_workers = options.workers});
  const data::ClassificationLoader valid_loader(blobs(30, 2), batcher,
                                                {.batch_size = 30, .num_workers = options.workers});
  optim::Adam adam;
  std::ostringstream out;
  TrainingRun run;
  LearnerConfig config{.epochs = options.epochs,
                       .directory = options.directory,
                       .resume = options.resume,
                       .seed = options.seed,
                       .settings = options.settings,
                       .notes = options.notes,
                       .precision = options.precision,
                       .progress = Progress::Style::Lines,
                       .out = &out};
  run.model = fit(fresh_net(), adam, optim::CosineAnnealingLr{.base_lr = 0.02, .t_max = 40},
                  train_loader, &valid_loader, classify, config, &run.history);
  run.output = out.str();
  return run;
}

inline TrainingRun train_for(int epochs, const std::filesystem::path& dir, bool resume) {
  return train({.epochs = epochs, .directory = dir, .resume = resume});
}

// Parameters equal bit for bit, name by name.
inline void expect_same_parameters(const Net& a, const Net& b) {
  const auto x = nn::named_parameters(a);
  const auto y = nn::named_parameters(b);
  ASSERT_EQ(x.size(), y.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(x[i].name, y[i].name);
    EXPECT_EQ(kiln::detail::into_data(x[i].value).to_f64_vec(),
              kiln::detail::into_data(y[i].value).to_f64_vec())
        << x[i].name << " differs";
  }
}

}  // namespace kiln::train::testing
