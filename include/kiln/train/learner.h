// The training loop: epochs of (forward, backward, optimizer step) over a DataLoader, validation
// after each epoch, a live progress display, a CSV log and an SVG chart, and checkpoints from
// which an interrupted run resumes exactly where it would have been.
//
//   train::LearnerConfig config{.epochs = 20, .directory = "runs/digits"};
//   auto step = [](const Mlp& m, const data::ClassificationBatch& b) {
//     auto logits = m.forward(b.features);
//     return train::classification_step(nn::cross_entropy(logits, b.labels), logits, b.labels);
//   };
//   optim::Adam adam({});
//   Mlp trained = train::fit(model, adam, optim::ConstantLr{1e-3}, train_loader, valid_loader,
//                            step, config);
//
// Exactness on resume: epoch e shuffles its data with (loader seed + e) and seeds the model's
// device with (config.seed + e) before it starts, so dropout masks and data order depend only on
// the epoch; the checkpoint holds the parameters, the optimizer state (step counts included, which
// index the schedule) and the log. A resumed run therefore ends with the same parameters as an
// uninterrupted one.
//
// A run directory records its configuration (seed, epochs, the model's parameter names and
// shapes, and LearnerConfig::settings) in run.json. Resuming under another configuration throws
// InvalidArgument saying what differs (resume = false starts over); a larger epochs extends the
// run. Checkpoints carry a checksum of their tensors; when the newest is corrupt or unreadable,
// the run resumes from the one before it (two are kept) and prints a warning line, and when
// none is usable, InvalidArgument says why for each.
//
// Data-parallel training (LearnerConfig::data_parallel, kiln/train/data_parallel.h): every rank
// calls fit with the same model, optimizer and configuration and its own shard of the training
// data (DataParallel::shard); rank 0's parameters are broadcast first, each backward pass
// averages the gradients over the ranks, and the epoch's losses and accuracies are summed over
// the ranks, so every rank logs the same numbers. Rank 0 alone prints, and writes and resumes the
// run directory: the other ranks resume from the checkpoint rank 0 chose (the directory must be
// reachable from every rank) and write nothing. Data-parallel steps are not captured.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kiln/autocast.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/nn/module.h"
#include "kiln/nn/record.h"
#include "kiln/optim/clip.h"
#include "kiln/optim/grad_scaler.h"
#include "kiln/optim/optimizer.h"
#include "kiln/record/safetensors.h"
#include "kiln/train/data_parallel.h"
#include "kiln/train/history.h"
#include "kiln/train/progress.h"

namespace kiln::train {

// What the user's step function returns for one batch.
struct StepOutput {
  Tensor<1> loss;             // the batch's mean loss, one element (tracked in training)
  std::int64_t samples = 0;   // items in the batch
  std::int64_t correct = -1;  // correctly classified items, or -1 when not a classifier
  // Inside a capture (kiln/graph.h), where nothing is read to the host: the count of correct
  // items as a tensor of one element, read after each replay in place of `correct`.
  std::optional<Tensor<1, Int>> correct_count = std::nullopt;
};

// A classifier's step output: loss, batch size and the number of argmax hits.
StepOutput classification_step(const Tensor<1>& loss, const Tensor<2>& logits,
                               const Tensor<1, Int>& labels);

struct LearnerConfig {
  int epochs = 10;
  // Where checkpoints, log.csv and chart.svg go; empty: nothing is written and nothing resumed.
  std::filesystem::path directory = {};
  // Continue from the latest checkpoint in directory when there is one.
  bool resume = true;
  // Epoch e seeds the model's device with seed + e (dropout and other random ops).
  std::uint64_t seed = 0;
  // What else defines the run: data (with a fingerprint of its content), learning rate, batch
  // size, ... Recorded in directory/run.json with seed, epochs and the model's parameter names
  // and shapes; resuming under different values throws InvalidArgument naming each difference.
  // More epochs than recorded extends the run. Keys "seed", "epochs", "parameters" are taken.
  std::map<std::string, std::string> settings = {};
  // Recorded in run.json for reference, not compared (e.g. the data's path); a changed note is
  // mentioned on resume.
  std::map<std::string, std::string> notes = {};
  // Clip the gradients' global 2-norm to this before each step.
  std::optional<double> clip_grad_norm = std::nullopt;
  // Capture the training step (kiln/graph.h) once a batch shape comes again after the first
  // optimizer step, and replay it for later batches of that shape (a graph per shape; on cuda
  // one CUDA graph launch per step). A step that cannot be captured (it reads to the host, e.g.
  // clip_grad_norm) runs eagerly, and the learner says why. KILN_CAPTURE=0 turns it off.
  bool capture = true;
  // The precision of the forward passes: DType::F32, or DType::BF16 / DType::F16 for mixed
  // precision (each step's and each validation pass's forward inside an AutocastScope on the
  // model's device, kiln/autocast.h; parameters, gradients and the optimizer stay f32). F16 steps
  // go through an optim::GradScaler: a step whose gradients overflow is skipped and the scale
  // lowered. InvalidArgument for another dtype.
  DType precision = DType::F32;
  Progress::Style progress = Progress::Style::Auto;
  std::ostream* out = &std::cout;
  // Data-parallel training over this rank's group (see the header comment); not owned. Null: one
  // process.
  const DataParallel* data_parallel = nullptr;
};

// The files of a run directory: run.json (the configuration), model-N.safetensors and
// optimizer-N.safetensors (the checkpoint of epoch N, with a checksum of their tensors in the
// metadata), log.csv and chart.svg. Every file is written atomically (a unique temporary,
// fsync, rename), so a crash leaves each file whole, old or new.
struct RunFiles {
  std::filesystem::path directory;
  std::filesystem::path config() const { return directory / "run.json"; }
  std::filesystem::path log() const { return directory / "log.csv"; }
  std::filesystem::path chart() const { return directory / "chart.svg"; }
  std::filesystem::path model(int epoch) const;
  std::filesystem::path optimizer(int epoch) const;
  // Epochs whose checkpoint was committed (listed in the log, both files present), newest first.
  std::vector<int> checkpoints() const;
  // The newest of checkpoints(), or 0 when there is none.
  int latest_checkpoint() const;
  // Writes the checkpoint files of epoch, then the log and chart (the log commits the epoch),
  // and removes checkpoints older than the one before it.
  void commit(int epoch, const record::TensorMap& model, const record::TensorMap& optimizer,
              const History& history) const;
  // Removes the checkpoints, log and chart (the start of a fresh run); other files stay.
  void clear() const;
};

namespace detail {

// Accumulates a pass's loss and accuracy.
struct PassMetrics {
  double loss_sum = 0;
  std::int64_t samples = 0;
  std::int64_t correct = 0;
  bool classifier = false;
  void add(const StepOutput& out, double loss);
  double mean_loss() const {
    return samples > 0 ? loss_sum / static_cast<double>(samples) : kNotMeasured;
  }
  double accuracy() const {
    return classifier && samples > 0 ? static_cast<double>(correct) / static_cast<double>(samples)
                                     : kNotMeasured;
  }
  std::string summary() const;
};

// A checkpoint read back with its checksums verified.
struct Checkpoint {
  int epoch = 0;
  std::filesystem::path model_path;
  record::TensorMap model;
  record::TensorMap optimizer;
};
// Reads the checkpoint of epoch; InvalidArgument if a file is unreadable or fails its checksum.
Checkpoint read_checkpoint(const RunFiles& files, int epoch);

// Prepares config.directory for fit. A fresh start (no resume, or nothing to resume) clears
// old checkpoints and records the configuration; a resume checks the recorded configuration
// (InvalidArgument naming every difference) and passes the newest usable checkpoint to
// restore, falling back to the one before with a warning when the newest is corrupt or
// restore throws. Returns the epoch to continue after (0 for a fresh start) and fills history.
int prepare_run(const LearnerConfig& config, const std::vector<nn::NamedParam>& params,
                const std::function<void(const Checkpoint&)>& restore, History& history);

Device model_device(const std::vector<nn::NamedParam>& params);
// Data-parallel runs (src/distributed/data_parallel.cpp): metrics summed over the ranks (their
// losses, samples and hits), and rank 0's epoch to continue after, on every rank.
void sum_over_ranks(PassMetrics& metrics, const DataParallel& data_parallel);
int rank0_start(int start, const DataParallel& data_parallel);
double read_loss(const Tensor<1>& loss);
// ShapeMismatch unless the step's loss has one element.
void check_loss(const Tensor<1>& loss);

// InvalidArgument unless precision is f32, bf16 or f16.
void check_precision(DType precision);
// forward() run inside an AutocastScope of precision on device (outside any for f32).
template <class Forward>
StepOutput forward_in(DType precision, const Device& device, Forward&& forward) {
  if (precision == DType::F32) return forward();
  const AutocastScope amp(device, precision);
  return forward();
}

// Whether KILN_CAPTURE allows the learner to capture (anything but "0").
bool capture_allowed();
void say_captured(std::ostream& out, const Device& device);
void say_not_captured(std::ostream& out, const std::string& why);

// The training steps captured so far, one graph per batch shape, each over a batch of its own
// that later batches are assigned into. Batches with `features` and `labels` (a
// ClassificationBatch) are captured; others always run eagerly.
template <class Batch>
class CapturedSteps {
  static constexpr bool kCapturable = requires(Batch b) {
    b.features.assign(b.features);
    b.labels.assign(b.labels);
  };

 public:
  explicit CapturedSteps(bool enabled) : enabled_(enabled && kCapturable) {}

  // Replays the graph of batch's shape on batch's values; false when there is none.
  bool replay(const Batch& batch, StepOutput& result) {
    if constexpr (kCapturable) {
      if (!enabled_) return false;
      auto it = graphs_.find(key(batch));
      if (it == graphs_.end()) return false;
      it->second.batch.features.assign(batch.features);
      it->second.batch.labels.assign(batch.labels);
      it->second.graph.replay();
      result = it->second.output;
      return true;
    }
    return false;
  }

  // Captures train_step over a copy of batch when its shape came before and the optimizer has
  // state; false (the caller runs the step eagerly) when it does not, or cannot be captured.
  template <class TrainStep>
  bool try_capture(const Batch& batch, bool optimizer_ready, const Device& device,
                   TrainStep& train_step, StepOutput& result, std::ostream& out) {
    if constexpr (kCapturable) {
      if (!enabled_) return false;
      const std::vector<std::int64_t> shape = key(batch);
      if (!optimizer_ready || seen_.insert(shape).second) return false;
      Entry entry{copy(batch), {}, {}};
      try {
        entry.graph = capture(device, [&] { entry.output = train_step(entry.batch); });
      } catch (const InvalidArgument& e) {
        enabled_ = false;
        say_not_captured(out, e.what());
        return false;
      }
      if (graphs_.empty()) say_captured(out, device);
      result = entry.output;
      graphs_.emplace(shape, std::move(entry));
      return true;
    }
    return false;
  }

 private:
  struct Entry {
    Batch batch;
    StepOutput output;
    Graph graph;
  };
  static std::vector<std::int64_t> key(const Batch& batch) {
    const auto features = batch.features.shape().dims();
    std::vector<std::int64_t> dims(features.begin(), features.end());
    for (std::int64_t d : batch.labels.shape().dims()) dims.push_back(d);
    dims.push_back(static_cast<std::int64_t>(batch.features.dtype()));
    dims.push_back(static_cast<std::int64_t>(batch.labels.dtype()));
    return dims;
  }
  // A batch on storage of its own, which replays read.
  static Batch copy(const Batch& batch) {
    Batch out = batch;
    out.features = decltype(batch.features)::empty(batch.features.shape(), batch.features.device(),
                                                   batch.features.dtype());
    out.features.assign(batch.features);
    out.labels = decltype(batch.labels)::empty(batch.labels.shape(), batch.labels.device(),
                                               batch.labels.dtype());
    out.labels.assign(batch.labels);
    return out;
  }

  bool enabled_;
  std::set<std::vector<std::int64_t>> seen_;
  std::map<std::vector<std::int64_t>, Entry> graphs_;
};

// One pass over loader without training (the model in validation mode), reporting to progress.
template <class Model, class Loader, class Step>
PassMetrics run_pass(const Model& model, const Loader& loader, Step& step, Progress* progress,
                     DType precision = DType::F32) {
  const Model evaluated = nn::valid(model);
  const Device device = model_device(nn::named_parameters(evaluated));
  PassMetrics metrics;
  for (auto& batch : loader.epoch(0)) {
    StepOutput result = forward_in(precision, device, [&] { return step(evaluated, batch); });
    metrics.add(result, read_loss(result.loss));
    if (progress != nullptr) progress->update(result.samples, metrics.mean_loss());
  }
  return metrics;
}

}  // namespace detail

template <nn::detail::Visitable Model, class Schedule, class TrainLoader, class ValidLoader,
          class Step>
Model fit(Model model, optim::Optimizer& optimizer, const Schedule& schedule,
          const TrainLoader& train_loader, const ValidLoader* valid_loader, Step step,
          const LearnerConfig& config, History* history_out = nullptr) {
  const DataParallel* ddp = config.data_parallel;
  const bool lead = ddp == nullptr || ddp->rank() == 0;  // prints and writes the run directory
  std::ostream quiet(nullptr);
  std::ostream& out = lead ? *config.out : quiet;
  const RunFiles files{config.directory};
  if (config.epochs < 1) {
    kiln::detail::fail<InvalidArgument>("train::fit", "epochs must be at least 1, got ",
                                        config.epochs);
  }
  detail::check_precision(config.precision);
  model = nn::train(std::move(model));
  History history;
  int start = 0;
  if (!config.directory.empty()) {
    // A checkpoint is applied to a copy first, so one that fails half way changes nothing.
    auto restore = [&](const detail::Checkpoint& checkpoint) {
      Model restored = model;
      nn::detail::load_record(&restored, nn::detail::visit_fn<Model>, checkpoint.model, {},
                              checkpoint.model_path.string());
      optimizer.load_state_dict(restored, checkpoint.optimizer);
      model = std::move(restored);
    };
    if (lead) start = detail::prepare_run(config, nn::named_parameters(model), restore, history);
    // The other ranks resume from the checkpoint rank 0 chose.
    if (ddp != nullptr) start = detail::rank0_start(start, *ddp);
    if (!lead && start > 0) restore(detail::read_checkpoint(files, start));
  }
  if (ddp != nullptr) {
    model = ddp->broadcast_parameters(std::move(model));
    out << "data parallel: " << ddp->world_size() << " ranks (" << ddp->group().backend_name()
        << "), gradients averaged in buckets of "
        << static_cast<double>(ddp->options().bucket_bytes) / (1 << 20) << " MiB "
        << (ddp->options().overlap ? "during" : "after") << " each backward pass\n";
  }
  const Device device = detail::model_device(nn::named_parameters(model));
  detail::CapturedSteps<typename std::decay_t<decltype(*train_loader.epoch(0).begin())>> captured(
      config.capture && detail::capture_allowed() && ddp == nullptr);
  optim::GradScaler scaler = optim::GradScaler::for_dtype(config.precision);
  for (int epoch = start + 1; epoch <= config.epochs; ++epoch) {
    const auto started = Progress::Clock::now();
    device.seed(config.seed + static_cast<std::uint64_t>(epoch));
    const std::string label =
        "epoch " + std::to_string(epoch) + "/" + std::to_string(config.epochs);
    EpochRecord record;
    record.epoch = epoch;
    record.learning_rate = static_cast<double>(schedule.lr(optimizer.steps()));

    detail::PassMetrics train_metrics;
    Progress progress(out, label + " train", static_cast<std::int64_t>(train_loader.num_batches()),
                      config.progress);
    for (auto& batch : train_loader.epoch(static_cast<std::uint64_t>(epoch))) {
      // One training step: forward (in config.precision), backward, clipping and the
      // optimizer's update (skipped by the scaler when f16 gradients overflow).
      auto train_step = [&](const auto& input) {
        StepOutput result =
            detail::forward_in(config.precision, device, [&] { return step(model, input); });
        detail::check_loss(result.loss);
        Gradients grads = ddp != nullptr ? ddp->backward(model, scaler.scale(result.loss))
                                         : scaler.scale(result.loss).backward();
        if (config.clip_grad_norm) {
          scaler.unscale(model, grads);
          optim::clip_grad_norm(model, grads, *config.clip_grad_norm);
        }
        scaler.step(optimizer, model, grads, schedule);
        return result;
      };
      StepOutput result;
      if (!captured.replay(batch, result) &&
          !captured.try_capture(batch, optimizer.steps() > 0, device, train_step, result, out)) {
        result = train_step(batch);
      }
      const double loss = detail::read_loss(result.loss);
      if (result.correct_count) result.correct = result.correct_count->into_scalar<std::int64_t>();
      train_metrics.add(result, loss);
      progress.update(result.samples, train_metrics.mean_loss());
    }
    if (ddp != nullptr) detail::sum_over_ranks(train_metrics, *ddp);
    progress.finish(train_metrics.summary());
    record.train_loss = train_metrics.mean_loss();
    record.train_accuracy = train_metrics.accuracy();

    if (valid_loader != nullptr) {
      Progress check(out, label + " valid", static_cast<std::int64_t>(valid_loader->num_batches()),
                     config.progress);
      detail::PassMetrics valid_metrics =
          detail::run_pass(model, *valid_loader, step, &check, config.precision);
      if (ddp != nullptr) detail::sum_over_ranks(valid_metrics, *ddp);
      check.finish(valid_metrics.summary());
      record.valid_loss = valid_metrics.mean_loss();
      record.valid_accuracy = valid_metrics.accuracy();
    }
    record.seconds = std::chrono::duration<double>(Progress::Clock::now() - started).count();
    history.add(record);
    if (!config.directory.empty() && lead) {
      files.commit(epoch, nn::to_record(model), optimizer.state_dict(), history);
    }
  }
  if (history_out != nullptr) *history_out = history;
  return model;
}

// Runs step over a loader without training (validation or test), returning loss and accuracy.
template <nn::detail::Visitable Model, class Loader, class Step>
EpochRecord evaluate(const Model& model, const Loader& loader, Step step) {
  const detail::PassMetrics metrics = detail::run_pass(model, loader, step, nullptr);
  EpochRecord record;
  record.valid_loss = metrics.mean_loss();
  record.valid_accuracy = metrics.accuracy();
  return record;
}

}  // namespace kiln::train
