// Per-epoch metrics of a training run, written beside the checkpoints as a CSV log and an SVG
// chart (loss and accuracy against epoch, training and validation).
#pragma once

#include <filesystem>
#include <limits>
#include <string>
#include <vector>

namespace kiln::train {

inline constexpr double kNotMeasured = std::numeric_limits<double>::quiet_NaN();

struct EpochRecord {
  int epoch = 0;  // 1-based
  double train_loss = kNotMeasured;
  double train_accuracy = kNotMeasured;
  double valid_loss = kNotMeasured;
  double valid_accuracy = kNotMeasured;
  double learning_rate = kNotMeasured;
  double seconds = kNotMeasured;
};

class History {
 public:
  void add(const EpochRecord& record) { records_.push_back(record); }
  const std::vector<EpochRecord>& records() const noexcept { return records_; }
  // Keeps the epochs up to and including `epoch` (a resumed run rewrites the rest).
  void truncate(int epoch);

  void write_csv(const std::filesystem::path& path) const;
  // InvalidArgument naming the file and line for a malformed log.
  static History read_csv(const std::filesystem::path& path);
  void write_svg(const std::filesystem::path& path) const;
  std::string svg() const;

 private:
  std::vector<EpochRecord> records_;
};

}  // namespace kiln::train
