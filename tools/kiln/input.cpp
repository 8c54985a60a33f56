#include "tools/kiln/input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <span>
#include <system_error>
#include <vector>

#include "kiln/detail/format.h"
#include "kiln/error.h"
#include "record/checksum.h"

namespace kiln::tools {
namespace {

std::string describe_limit(std::uint64_t max_bytes) {
  if (max_bytes % kGiB == 0) return kiln::detail::concat(max_bytes / kGiB, " GiB");
  return kiln::detail::concat(max_bytes, " bytes");
}

// Feeds the file to consume in pieces; stops with InvalidArgument as soon as it passes
// max_bytes, so an endless file (/dev/zero, a pipe) costs at most max_bytes of reading.
void read_pieces(const std::filesystem::path& path, std::uint64_t max_bytes, std::string_view op,
                 const std::function<void(std::span<const std::byte>)>& consume) {
  auto fail = [&](auto&&... parts) {
    kiln::detail::fail<InvalidArgument>(op, path.string(), ": ", parts...);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open: ", std::generic_category().message(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0) fail("cannot read: ", std::generic_category().message(errno));
  if (S_ISDIR(info.st_mode)) fail("is a directory, not a file");
  const auto too_large = [&] {
    fail("is larger than ", describe_limit(max_bytes), ", the limit for this input");
  };
  if (S_ISREG(info.st_mode) && static_cast<std::uint64_t>(info.st_size) > max_bytes) too_large();

  std::vector<std::byte> buffer(std::size_t{1} << 20);
  std::uint64_t total = 0;
  for (;;) {
    const ssize_t got = ::read(fd, buffer.data(), buffer.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      fail("cannot read: ", std::generic_category().message(errno));
    }
    if (got == 0) return;
    total += static_cast<std::uint64_t>(got);
    if (total > max_bytes) too_large();
    consume(std::span<const std::byte>(buffer.data(), static_cast<std::size_t>(got)));
  }
}

}  // namespace

void require_range(std::string_view op, std::string_view option, std::int64_t value,
                   std::int64_t low, std::int64_t high) {
  if (value >= low && value <= high) return;
  if (high == INT64_MAX) {
    kiln::detail::fail<InvalidArgument>(op, option, " must be at least ", low, ", got ", value);
  }
  kiln::detail::fail<InvalidArgument>(op, option, " must be between ", low, " and ", high, ", got ",
                                      value);
}

std::string read_file_limited(const std::filesystem::path& path, std::uint64_t max_bytes,
                              std::string_view op) {
  // Pieces are joined once the end is reached, so the peak is the content plus one piece, not
  // the doubling of a growing string.
  std::vector<std::string> pieces;
  std::size_t total = 0;
  read_pieces(path, max_bytes, op, [&](std::span<const std::byte> bytes) {
    pieces.emplace_back(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    total += bytes.size();
  });
  std::string content;
  content.reserve(total);
  for (const std::string& piece : pieces) content += piece;
  return content;
}

std::string fingerprint_file(const std::filesystem::path& path, std::uint64_t max_bytes,
                             std::string_view op) {
  record::detail::Crc32c crc;
  std::uint64_t total = 0;
  read_pieces(path, max_bytes, op, [&](std::span<const std::byte> bytes) {
    crc.update(bytes);
    total += bytes.size();
  });
  return kiln::detail::concat(record::detail::checksum_text(crc.value()), ", ", total, " bytes");
}

}  // namespace kiln::tools
