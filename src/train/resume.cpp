// Starting or resuming a run in its directory: the recorded configuration, the choice of the
// checkpoint to resume from, and the fallback when the newest is damaged.
#include <ostream>
#include <system_error>

#include "kiln/detail/format.h"
#include "kiln/train/learner.h"
#include "record/checksum.h"
#include "train/run_record.h"

namespace kiln::train::detail {
namespace {

constexpr std::string_view kOp = "train::fit";
constexpr std::string_view kStartOver =
    "start over with LearnerConfig::resume = false (kiln train: --fresh)";

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : "; ") + part;
  return out;
}

// The model's identity without its values: parameter names and shapes, summarised.
std::string parameter_signature(const std::vector<nn::NamedParam>& params) {
  record::detail::Crc32c crc;
  std::int64_t values = 0;
  for (const nn::NamedParam& p : params) {
    const std::string line = p.name + " " + p.value->shape().to_string() + "\n";
    crc.update(std::as_bytes(std::span<const char>(line.data(), line.size())));
    values += p.value->shape().num_elements();
  }
  return kiln::detail::concat(params.size(), " tensors of ", values, " values, names and shapes ",
                              record::detail::checksum_text(crc.value()));
}

void make_directory(const std::filesystem::path& directory) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (!error && !std::filesystem::is_directory(directory, error)) {
    error = std::make_error_code(std::errc::not_a_directory);
  }
  if (error) {
    kiln::detail::fail<InvalidArgument>(kOp, "cannot create the run directory ", directory.string(),
                                        ": ", error.message());
  }
}

RunRecord describe(const LearnerConfig& config, const std::vector<nn::NamedParam>& params) {
  for (const char* taken : {"seed", "epochs", "parameters"}) {
    if (config.settings.contains(taken)) {
      kiln::detail::fail<InvalidArgument>(kOp, "LearnerConfig::settings cannot use the key '",
                                          taken, "': fit records it itself");
    }
  }
  RunRecord record{config.seed, config.epochs, config.settings, config.notes};
  record.settings["parameters"] = parameter_signature(params);
  return record;
}

RunRecord read_recorded(const RunFiles& files) {
  try {
    return read_run_record(files.config());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(kiln::detail::concat(e.what(), "; ", kStartOver));
  }
}

}  // namespace

int prepare_run(const LearnerConfig& config, const std::vector<nn::NamedParam>& params,
                const std::function<void(const Checkpoint&)>& restore, History& history) {
  std::ostream& out = *config.out;
  const RunFiles files{config.directory};
  const RunRecord current = describe(config, params);
  make_directory(config.directory);

  const std::vector<int> epochs = config.resume ? files.checkpoints() : std::vector<int>{};
  if (epochs.empty()) {
    // Old checkpoints go before the new configuration is recorded: a crash in between must not
    // leave them beside a configuration they do not belong to.
    files.clear();
    write_run_record(files.config(), current);
    return 0;
  }
  const RunRecord recorded = read_recorded(files);
  const std::vector<std::string> differences = run_differences(recorded, current);
  if (!differences.empty()) {
    kiln::detail::fail<InvalidArgument>(
        kOp, config.directory.string(),
        " holds a run with another configuration: ", join(differences),
        "; resume it with its own settings, or ", kStartOver);
  }
  const std::vector<std::string> notes = note_changes(recorded, current);
  for (const std::string& note : notes) out << "note: " << note << "\n";

  std::vector<std::string> failures;
  for (int epoch : epochs) {
    try {
      restore(read_checkpoint(files, epoch));
    } catch (const Error& e) {
      out << "warning: the checkpoint of epoch " << epoch << " is unusable: " << e.what() << "\n";
      failures.push_back(kiln::detail::concat("epoch ", epoch, ": ", e.what()));
      continue;
    }
    history = History::read_csv(files.log());
    history.truncate(epoch);
    out << "resuming from epoch " << epoch << " (" << files.model(epoch).string() << ")\n";
    if (current.epochs > recorded.epochs) {
      out << "extending the run from " << recorded.epochs << " to " << current.epochs
          << " epochs\n";
    }
    if (current.epochs != recorded.epochs || !notes.empty()) {
      write_run_record(files.config(), current);
    }
    return epoch;
  }
  kiln::detail::fail<InvalidArgument>(kOp, "no usable checkpoint in ", config.directory.string(),
                                      ": ", join(failures), "; ", kStartOver);
}

}  // namespace kiln::train::detail
