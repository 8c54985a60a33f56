// What the user hands the kiln command, checked: option values against their range, and files
// read with a size limit so that /dev/zero or a huge file is an error, not a machine out of memory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace kiln::tools {

inline constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

// InvalidArgument "[op] option must be ... , got value" unless low <= value <= high.
void require_range(std::string_view op, std::string_view option, std::int64_t value,
                   std::int64_t low, std::int64_t high = INT64_MAX);

// The whole file, at most max_bytes of it (InvalidArgument past that, or if it cannot be read).
std::string read_file_limited(const std::filesystem::path& path, std::uint64_t max_bytes,
                              std::string_view op);

// "crc32c:89abcdef, 12345 bytes": identifies the file's content (a run's data); the file is
// streamed, at most max_bytes of it.
std::string fingerprint_file(const std::filesystem::path& path, std::uint64_t max_bytes,
                             std::string_view op);

}  // namespace kiln::tools
