// The configuration a run directory records in run.json, so that a resume under another one
// (another seed, and so another split of the data; other data; another model) is refused
// instead of silently mixing two runs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace kiln::train::detail {

struct RunRecord {
  std::uint64_t seed = 0;
  int epochs = 0;
  std::map<std::string, std::string> settings;  // compared on resume
  std::map<std::string, std::string> notes;     // kept for reference only
};

// Written atomically; InvalidArgument if it cannot be.
void write_run_record(const std::filesystem::path& path, const RunRecord& record);
// InvalidArgument naming the file if it is missing, unreadable or not a run record.
RunRecord read_run_record(const std::filesystem::path& path);

// What forbids continuing `recorded` as `current`, one phrase per difference, e.g.
// "seed 2 here but 1 in the run". More epochs than recorded is no difference: it extends the run.
std::vector<std::string> run_differences(const RunRecord& recorded, const RunRecord& current);
// Notes whose values changed, e.g. "data_path x here but y in the run".
std::vector<std::string> note_changes(const RunRecord& recorded, const RunRecord& current);

}  // namespace kiln::train::detail
