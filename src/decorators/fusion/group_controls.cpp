// The group controls of fusion-bisect: reading them, numbering groups, the count written at exit.
#include "decorators/fusion/group_controls.h"

#include <atomic>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "contract/backend.h"
#include "contract/fused_program.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::fusion {
namespace {

std::atomic<std::uint64_t> next_group{0};

std::optional<std::uint64_t> number_from_environment(const char* variable) {
  const char* text = std::getenv(variable);
  if (text == nullptr || *text == '\0') return std::nullopt;
  const std::string_view value(text);
  std::uint64_t number = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
  if (error != std::errc() || end != value.data() + value.size()) {
    detail::fail<InvalidArgument>(
        variable, "expected a group number (a non-negative integer), got \"", value, "\"");
  }
  return number;
}

// The path is copied once: the environment may change before exit.
std::string& count_file() {
  static std::string path;
  return path;
}

void write_count_at_exit() {
  std::FILE* file = std::fopen(count_file().c_str(), "w");
  if (file == nullptr) return;  // nothing to report to at exit; fusion-bisect says it is missing
  std::fprintf(file, "%" PRIu64 "\n", groups_numbered());
  std::fclose(file);
}

}  // namespace

GroupControls GroupControls::from_environment() {
  GroupControls controls;
  if (const auto limit = number_from_environment("KILN_FUSION_LIMIT")) controls.limit = *limit;
  controls.only = number_from_environment("KILN_FUSION_ONLY");
  const char* describe = std::getenv("KILN_FUSION_DESCRIBE");
  controls.describe_all = describe != nullptr && std::string_view(describe) == "all";
  if (!controls.describe_all) controls.describe = number_from_environment("KILN_FUSION_DESCRIBE");
  controls.fault = number_from_environment("KILN_FUSION_FAULT_FOR_TESTS");
  static std::once_flag count_writer;
  std::call_once(count_writer, [] {
    const char* path = std::getenv("KILN_FUSION_COUNT_FILE");
    if (path == nullptr || *path == '\0') return;
    count_file() = path;
    std::atexit(write_count_at_exit);
  });
  return controls;
}

std::uint64_t take_group_number() noexcept {
  return next_group.fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t groups_numbered() noexcept { return next_group.load(std::memory_order_relaxed); }

std::string describe_group(std::uint64_t group, bool fused, const FusedProgram& program) {
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016" PRIx64, structure_hash(program));
  return detail::concat("kiln fusion: group #", group, " (structure hash ", hash, ", run ",
                        fused ? "fused" : "step by step", "):\n", describe(program),
                        "kiln fusion: end of group #", group, "\n");
}

void inject_fault_for_tests(Backend& inner, std::vector<Primitive>& results) {
  if (results.empty()) return;
  Primitive& target = results.back();
  const TensorData data = inner.into_data(target).get();
  std::vector<double> values = data.to_f64_vec();
  if (values.empty()) return;
  values[0] = data.dtype() == DType::Bool ? (values[0] != 0 ? 0.0 : 1.0) : values[0] + 1.0;
  target = inner.from_data(TensorData::from_vec(values, data.shape()).convert(data.dtype()),
                           target->device());
}

}  // namespace kiln::fusion
