// The files of a run directory: checkpoints with checksums, the log that commits them, and
// their removal.
#include <charconv>
#include <system_error>

#include "kiln/detail/format.h"
#include "kiln/train/learner.h"
#include "record/checksum.h"

namespace kiln::train {
namespace {

constexpr std::string_view kOp = "train::fit";
// The metadata entry of a checkpoint file holding record::detail::tensors_checksum.
constexpr std::string_view kChecksumKey = "kiln.checksum";

bool present(const std::filesystem::path& path) {
  std::error_code ignored;
  return std::filesystem::exists(path, ignored);
}

// "model-12.safetensors" and the like: the names RunFiles writes.
bool is_checkpoint_name(std::string_view name) {
  constexpr std::string_view kSuffix = ".safetensors";
  for (std::string_view prefix : {"model-", "optimizer-"}) {
    if (!name.starts_with(prefix) || !name.ends_with(kSuffix)) continue;
    const std::string_view number =
        name.substr(prefix.size(), name.size() - prefix.size() - kSuffix.size());
    int epoch = 0;
    const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), epoch);
    if (!number.empty() && error == std::errc() && end == number.data() + number.size()) {
      return true;
    }
  }
  return false;
}

void save_checked(const std::filesystem::path& path, const record::TensorMap& tensors) {
  record::save_safetensors(
      path, tensors, {{std::string(kChecksumKey), record::detail::tensors_checksum(tensors)}});
}

record::TensorMap load_checked(const std::filesystem::path& path) {
  record::SafetensorsFile file = record::load_safetensors_with_metadata(path);
  const auto recorded = file.metadata.find(std::string(kChecksumKey));
  if (recorded == file.metadata.end()) {
    kiln::detail::fail<InvalidArgument>(kOp, path.string(), ": no ", kChecksumKey,
                                        " in its metadata (not a kiln checkpoint?)");
  }
  const std::string actual = record::detail::tensors_checksum(file.tensors);
  if (actual != recorded->second) {
    kiln::detail::fail<InvalidArgument>(kOp, path.string(), ": its tensors give ", actual,
                                        " but the file records ", recorded->second,
                                        " (the file is corrupt)");
  }
  return std::move(file.tensors);
}

}  // namespace

std::filesystem::path RunFiles::model(int epoch) const {
  return directory / ("model-" + std::to_string(epoch) + ".safetensors");
}

std::filesystem::path RunFiles::optimizer(int epoch) const {
  return directory / ("optimizer-" + std::to_string(epoch) + ".safetensors");
}

std::vector<int> RunFiles::checkpoints() const {
  if (!present(log())) return {};
  const History history = History::read_csv(log());
  // The log is written after an epoch's checkpoint files, so an epoch it lists has both.
  std::vector<int> epochs;
  for (auto it = history.records().rbegin(); it != history.records().rend(); ++it) {
    if (present(model(it->epoch)) && present(optimizer(it->epoch))) epochs.push_back(it->epoch);
  }
  return epochs;
}

int RunFiles::latest_checkpoint() const {
  const std::vector<int> epochs = checkpoints();
  return epochs.empty() ? 0 : epochs.front();
}

void RunFiles::commit(int epoch, const record::TensorMap& model_record,
                      const record::TensorMap& optimizer_record, const History& history) const {
  save_checked(model(epoch), model_record);
  save_checked(optimizer(epoch), optimizer_record);
  history.write_csv(log());
  history.write_svg(chart());
  // Keep the newest checkpoint and the one before it, the fallback if the newest is damaged.
  for (int old = epoch - 2; old >= 1; --old) {
    std::error_code ignored;
    const bool had_model = std::filesystem::remove(model(old), ignored);
    const bool had_optimizer = std::filesystem::remove(optimizer(old), ignored);
    if (!had_model && !had_optimizer) break;
  }
}

void RunFiles::clear() const {
  std::error_code error;
  std::vector<std::filesystem::path> doomed;
  for (std::filesystem::directory_iterator it(directory, error), end; !error && it != end;
       it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name == log().filename() || name == chart().filename() || is_checkpoint_name(name)) {
      doomed.push_back(it->path());
    }
  }
  if (error) {
    kiln::detail::fail<InvalidArgument>(kOp, "cannot list the run directory ", directory.string(),
                                        ": ", error.message());
  }
  for (const std::filesystem::path& path : doomed) {
    if (!std::filesystem::remove(path, error) && error) {
      kiln::detail::fail<InvalidArgument>(kOp, "cannot remove ", path.string(),
                                          " to start the run over: ", error.message());
    }
  }
}

namespace detail {

Checkpoint read_checkpoint(const RunFiles& files, int epoch) {
  Checkpoint checkpoint{epoch, files.model(epoch), {}, {}};
  checkpoint.model = load_checked(files.model(epoch));
  checkpoint.optimizer = load_checked(files.optimizer(epoch));
  return checkpoint;
}

}  // namespace detail
}  // namespace kiln::train
