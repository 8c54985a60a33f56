#include "train/run_record.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/atomic_file.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::train::detail {
namespace {

using Json = nlohmann::json;
constexpr std::string_view kOp = "train::fit";
constexpr std::string_view kFormat = "kiln run";
constexpr int kVersion = 1;
// run.json is a few hundred bytes; a larger one is not ours.
constexpr std::streamsize kMaxBytes = 1 << 20;

std::string shorten(const std::string& text) {
  constexpr std::size_t kLimit = 100;
  return text.size() <= kLimit ? text : text.substr(0, kLimit) + "...";
}

// "name a here but b in the run", or with "absent" for a missing side.
void compare_maps(const std::map<std::string, std::string>& recorded,
                  const std::map<std::string, std::string>& current,
                  std::vector<std::string>& out) {
  auto value_in = [](const std::map<std::string, std::string>& map, const std::string& key) {
    const auto it = map.find(key);
    return it == map.end() ? std::string("absent") : shorten(it->second);
  };
  std::map<std::string, int> keys;
  for (const auto& [key, value] : recorded) keys[key] = 0;
  for (const auto& [key, value] : current) keys[key] = 0;
  for (const auto& [key, unused] : keys) {
    const auto a = recorded.find(key), b = current.find(key);
    const bool same = a != recorded.end() && b != current.end() && a->second == b->second;
    if (!same) {
      out.push_back(kiln::detail::concat(key, " ", value_in(current, key), " here but ",
                                         value_in(recorded, key), " in the run"));
    }
  }
}

std::map<std::string, std::string> read_strings(const Json& json, const char* field,
                                                const std::filesystem::path& path) {
  std::map<std::string, std::string> out;
  if (!json.contains(field) || !json[field].is_object()) {
    kiln::detail::fail<InvalidArgument>(kOp, path.string(), ": not a kiln run record (no '", field,
                                        "' object)");
  }
  for (const auto& [key, value] : json[field].items()) {
    if (!value.is_string()) {
      kiln::detail::fail<InvalidArgument>(kOp, path.string(), ": ", field, " entry '", key,
                                          "' is not a string");
    }
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

}  // namespace

void write_run_record(const std::filesystem::path& path, const RunRecord& record) {
  Json json = {{"format", kFormat},       {"version", kVersion},         {"seed", record.seed},
               {"epochs", record.epochs}, {"settings", record.settings}, {"notes", record.notes}};
  std::string text;
  try {
    text = json.dump(2) + "\n";
  } catch (const Json::exception&) {
    kiln::detail::fail<InvalidArgument>(kOp, path.string(),
                                        ": a setting or note is not valid UTF-8");
  }
  kiln::detail::write_file_atomically(path, text, kOp);
}

RunRecord read_run_record(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    kiln::detail::fail<InvalidArgument>(
        kOp, path.string(), ": cannot read the run's configuration (made by an older kiln?)");
  }
  std::string text(static_cast<std::size_t>(kMaxBytes) + 1, '\0');
  in.read(text.data(), kMaxBytes + 1);
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > static_cast<std::size_t>(kMaxBytes)) {
    kiln::detail::fail<InvalidArgument>(kOp, path.string(), ": larger than ", kMaxBytes,
                                        " bytes, not a kiln run record");
  }
  Json json;
  try {
    json = Json::parse(text);
  } catch (const Json::exception& e) {
    kiln::detail::fail<InvalidArgument>(kOp, path.string(), ": not a kiln run record: ", e.what());
  }
  auto field_is = [&](const char* name, auto check) {
    return json.is_object() && json.contains(name) && check(json[name]);
  };
  const bool ours = field_is("format", [](const Json& v) { return v == std::string(kFormat); }) &&
                    field_is("version", [](const Json& v) { return v == kVersion; }) &&
                    field_is("seed", [](const Json& v) { return v.is_number_unsigned(); }) &&
                    field_is("epochs", [](const Json& v) { return v.is_number_integer(); });
  if (!ours) {
    kiln::detail::fail<InvalidArgument>(kOp, path.string(),
                                        ": not a kiln run record (format, version, seed, epochs)");
  }
  RunRecord record;
  record.seed = json["seed"].get<std::uint64_t>();
  record.epochs = json["epochs"].get<int>();
  record.settings = read_strings(json, "settings", path);
  record.notes = read_strings(json, "notes", path);
  return record;
}

std::vector<std::string> run_differences(const RunRecord& recorded, const RunRecord& current) {
  std::vector<std::string> out;
  if (current.seed != recorded.seed) {
    out.push_back(
        kiln::detail::concat("seed ", current.seed, " here but ", recorded.seed, " in the run"));
  }
  if (current.epochs < recorded.epochs) {
    out.push_back(kiln::detail::concat("epochs ", current.epochs, " here but ", recorded.epochs,
                                       " in the run (a run can be extended, not shortened)"));
  }
  compare_maps(recorded.settings, current.settings, out);
  return out;
}

std::vector<std::string> note_changes(const RunRecord& recorded, const RunRecord& current) {
  std::vector<std::string> out;
  compare_maps(recorded.notes, current.notes, out);
  return out;
}

}  // namespace kiln::train::detail
