// `kiln train digits`: a classifier of the UCI handwritten digits (8x8 images), the main job of
// `./run demo`. A small convolutional network trained with AdamW and a cosine schedule. Under
// `kiln launch --nproc N` it trains data-parallel (kiln/train/data_parallel.h): each of the N
// ranks takes 32 / N images of every batch of 32 (rounded up), so the run is the one-process run
// up to the order of float sums; rank 0 prints and writes the run directory.
#include <kiln/data/classification.h>
#include <kiln/data/digits.h>
#include <kiln/data/views.h>
#include <kiln/distributed.h>
#include <kiln/kiln.h>
#include <kiln/nn/nn.h>
#include <kiln/optim/optim.h>
#include <kiln/train/data_parallel.h>
#include <kiln/train/learner.h>

#include <iomanip>

#include "tools/kiln/commands.h"
#include "tools/kiln/digits_net.h"
#include "tools/kiln/input.h"

namespace kiln::tools {
namespace {

train::StepOutput classify(const DigitsNet& model, const data::ClassificationBatch& batch) {
  const Tensor<2> logits = model.forward(batch.features);
  return train::classification_step(nn::cross_entropy(logits, batch.labels), logits, batch.labels);
}

std::string absolute_path(const std::filesystem::path& path) {
  std::error_code error;
  const std::filesystem::path absolute = std::filesystem::absolute(path, error);
  return (error ? path : absolute).string();
}

}  // namespace

int run_train_digits(const TrainDigitsOptions& options, std::ostream& all_ranks_out) {
  constexpr std::string_view kOp = "train digits";
  require_range(kOp, "--epochs", options.epochs, 1);
  const Device device = Device::default_device();
  // One process, or a rank of `kiln launch`; rank 0 alone prints.
  const ProcessGroup group = ProcessGroup::from_env(device);
  std::ostream quiet(nullptr);
  std::ostream& out = group.rank() == 0 ? all_ranks_out : quiet;
  // Read once with a limit before the CSV reader sees it: an endless or huge --data is an
  // error, and the fingerprint tells a resumed run whether its data changed.
  const std::string fingerprint = fingerprint_file(options.data, kGiB, kOp);
  device.seed(options.seed);
  const auto digits = data::load_digits(options.data);
  // 80% to train on, 20% held out for the test accuracy; a tenth of the training part validates.
  auto [rest, test] = data::random_split(digits, 0.8, options.seed);
  auto [training, validation] = data::random_split(rest, 0.9, options.seed + 1);
  out << "digits: " << digits->size() << " images (" << training->size() << " train, "
      << validation->size() << " validation, " << test->size() << " test) on " << device.to_string()
      << "\n";

  const data::ClassificationBatcher batcher(device);
  std::optional<train::DataParallel> data_parallel;
  const std::size_t world = static_cast<std::size_t>(group.size());
  const std::size_t batch_per_rank = (32 + world - 1) / world;
  data::DataLoaderOptions train_options{
      .batch_size = batch_per_rank, .shuffle = true, .seed = options.seed, .num_workers = 1};
  if (group.size() > 1) {
    data_parallel.emplace(group);
    train_options = data_parallel->shard(train_options);
    out << "world size " << group.size() << ": " << batch_per_rank << " images of every batch of "
        << batch_per_rank * world << " per rank\n";
  }
  const data::ClassificationLoader train_loader(training, batcher, train_options);
  const data::ClassificationLoader valid_loader(validation, batcher, {.batch_size = 256});
  const data::ClassificationLoader test_loader(test, batcher, {.batch_size = 256});

  DigitsNet model = make_digits_net(device);
  out << nn::describe(model, "DigitsNet") << "\n";

  optim::AdamW optimizer({.weight_decay = 1e-4});
  const auto steps = static_cast<std::int64_t>(train_loader.num_batches()) * options.epochs;
  const optim::CosineAnnealingLr schedule{.base_lr = 3e-3, .t_max = steps, .eta_min = 1e-5};
  train::LearnerConfig config{
      .epochs = options.epochs,
      .directory = options.directory,
      .resume = !options.fresh,
      .seed = options.seed,
      .settings = {{"model", "DigitsNet"},
                   {"data", fingerprint},
                   {"split", "80% train (a tenth of it validation), 20% test"},
                   {"optimizer", "AdamW, weight decay 1e-4"},
                   {"schedule", "cosine from 3e-3 to 1e-5 over all epochs"},
                   {"batch_size", std::to_string(batch_per_rank * world)}},
      .notes = {{"data_path", absolute_path(options.data)}},
      .precision = options.precision,
      .out = &out,
      .data_parallel = data_parallel ? &*data_parallel : nullptr};
  // Recorded only when mixed, so that runs made before the option resume as they were.
  if (options.precision != DType::F32) {
    config.settings["precision"] = std::string(dtype_name(options.precision));
  }
  const auto started = std::chrono::steady_clock::now();
  const DigitsNet trained =
      train::fit(model, optimizer, schedule, train_loader, &valid_loader, classify, config);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  const train::EpochRecord result = train::evaluate(trained, test_loader, classify);
  out << "trained in " << std::fixed << std::setprecision(1) << seconds << " s\n";
  out << "log: " << (options.directory / "log.csv").string() << "\n";
  out << "chart: " << (options.directory / "chart.svg").string() << "\n";
  out << "test loss: " << std::setprecision(4) << result.valid_loss << "\n";
  out << "test accuracy: " << std::setprecision(4) << result.valid_accuracy << "\n";
  if (device.kind() == DeviceKind::Cuda) {
    // Every kernel this run needed, compiled or found on disk: a count that grows with the
    // epochs would mean kernels keyed by something that changes per step.
    const KernelStats kernels = device.kernel_stats();
    out << "kernels: " << kernels.compiles << " compiled (" << std::setprecision(2)
        << kernels.compile_seconds << " s), " << kernels.disk_hits << " from the disk cache\n";
  }
  return 0;
}

}  // namespace kiln::tools
