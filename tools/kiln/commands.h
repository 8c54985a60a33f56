// The subcommands of the `kiln` command line.
#pragma once

#include <cstdint>
#include <filesystem>
#include <ostream>

namespace kiln::tools {

// `kiln info`: version, compiled-in backends and their availability, devices with their
// backend chain, and the dtype usage table per device.
int run_info(std::ostream& out);

// Where data shipped with kiln is found: the source tree it was built from, or the installed
// share directory.
std::filesystem::path shipped_data(const std::filesystem::path& relative);

struct TrainDigitsOptions {
  int epochs = 30;
  std::uint64_t seed = 1;
  std::filesystem::path data;       // digits.csv
  std::filesystem::path directory;  // checkpoints, log and chart
  bool fresh = false;               // ignore checkpoints in directory
};
// `kiln train digits`: trains and evaluates the digits classifier.
int run_train_digits(const TrainDigitsOptions& options, std::ostream& out);

struct TrainCharlmOptions {
  std::filesystem::path text;
  std::int64_t steps = 600;
  std::int64_t context = 64;
  std::int64_t sample_every = 100;
  std::uint64_t seed = 1;
};
// `kiln train charlm`: a small character-level transformer on a text file, printing samples.
int run_train_charlm(const TrainCharlmOptions& options, std::ostream& out);

}  // namespace kiln::tools
