#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <random>
#include <system_error>
#include <thread>

#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::detail {
namespace {

// Temporary names stay within NAME_MAX (255) whatever the target's name.
constexpr std::size_t kKeptNameBytes = 200;
constexpr int kNameAttempts = 64;

std::string reason(int error) { return std::generic_category().message(error); }

// Each thread draws its own names; random_device alone may be unavailable, so the clock and
// the thread id are mixed in.
std::string random_suffix() {
  thread_local std::mt19937_64 engine = [] {
    std::uint64_t seed =
        static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    seed ^= std::hash<std::thread::id>{}(std::this_thread::get_id()) * 0x9e3779b97f4a7c15ull;
    try {
      seed ^= (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    } catch (const std::exception&) {
    }
    return std::mt19937_64(seed ^ static_cast<std::uint64_t>(::getpid()));
  }();
  constexpr std::string_view kAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::string suffix(12, ' ');
  for (char& c : suffix) c = kAlphabet[engine() % kAlphabet.size()];
  return suffix;
}

std::filesystem::path directory_of(const std::filesystem::path& target) {
  const std::filesystem::path parent = target.parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}

}  // namespace

AtomicFile::AtomicFile(std::filesystem::path target, std::string_view op)
    : target_(std::move(target)), op_(op) {
  const std::string name = target_.filename().string();
  if (name.empty() || name == "." || name == "..") {
    kiln::detail::fail<InvalidArgument>(op_, target_.string(), ": not a file path");
  }
  const std::string kept = name.substr(0, std::min(name.size(), kKeptNameBytes));
  const std::filesystem::path directory = directory_of(target_);
  for (int attempt = 0; attempt < kNameAttempts; ++attempt) {
    const std::filesystem::path candidate = directory / ("." + kept + ".tmp-" + random_suffix());
    const int fd =
        ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0) {
      fd_ = fd;
      temporary_ = candidate;
      return;
    }
    if (errno != EEXIST) fail("cannot create a temporary file in " + directory.string(), errno);
  }
  fail("cannot create a temporary file in " + directory.string(), EEXIST);
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
  temporary_.clear();
}

void AtomicFile::fail(std::string_view step, int error) {
  discard();
  kiln::detail::fail<InvalidArgument>(op_, target_.string(), ": ", step, ": ", reason(error));
}

void AtomicFile::write(std::span<const std::byte> bytes) {
  if (fd_ < 0) {
    kiln::detail::fail<InvalidArgument>(op_, target_.string(),
                                        ": write after the file was committed or failed");
  }
  // One write(2) moves at most about 2 GiB on Linux; larger buffers take several.
  constexpr std::size_t kChunk = std::size_t{1} << 30;
  while (!bytes.empty()) {
    const ssize_t written = ::write(fd_, bytes.data(), std::min(bytes.size(), kChunk));
    if (written < 0) {
      if (errno == EINTR) continue;
      fail("cannot write " + temporary_.string(), errno);
    }
    bytes = bytes.subspan(static_cast<std::size_t>(written));
  }
}

void AtomicFile::write(std::string_view text) {
  write(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

void AtomicFile::commit() {
  if (fd_ < 0) {
    kiln::detail::fail<InvalidArgument>(op_, target_.string(),
                                        ": commit after the file was committed or failed");
  }
  if (::fsync(fd_) != 0) fail("cannot flush " + temporary_.string() + " to the disk", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close " + temporary_.string(), errno);
  if (::rename(temporary_.c_str(), target_.c_str()) != 0) {
    fail("cannot rename " + temporary_.string() + " over it", errno);
  }
  temporary_.clear();
  // The rename is durable only once the directory entry is; file systems that cannot sync a
  // directory say EINVAL, and there is nothing more to do on them.
  const std::filesystem::path directory = directory_of(target_);
  const int dir_fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) fail("written, but cannot open " + directory.string() + " to sync it", errno);
  const int synced = ::fsync(dir_fd);
  const int sync_error = errno;
  ::close(dir_fd);
  if (synced != 0 && sync_error != EINVAL) {
    fail("written, but cannot sync the directory " + directory.string(), sync_error);
  }
}

void write_file_atomically(const std::filesystem::path& target, std::string_view content,
                           std::string_view op) {
  AtomicFile file(target, op);
  file.write(content);
  file.commit();
}

}  // namespace kiln::detail
