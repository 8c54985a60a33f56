// core/buffer.h's page advice, as the kernel records it (/proc/self/smaps: each mapping's
// VmFlags, hg for MADV_HUGEPAGE and nh for MADV_NOHUGEPAGE, and its resident bytes).
#include "core/buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace kiln {
namespace {

struct Mapping {
  std::string flags;          // VmFlags' two-letter codes, space-separated
  std::uint64_t rss_kib = 0;  // resident
};

// The mapping that holds address, or nothing where /proc/self/smaps is not there.
std::optional<Mapping> mapping_of(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  if (!smaps) return std::nullopt;
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::string line;
  bool inside = false;
  Mapping found;
  while (std::getline(smaps, line)) {
    std::uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (line.find(':') > line.find(' ') && (range >> std::hex >> begin >> dash >> end) &&
        dash == '-') {
      if (inside) return found;
      inside = begin <= at && at < end;
      continue;
    }
    if (!inside) continue;
    if (line.rfind("Rss:", 0) == 0) found.rss_kib = std::stoull(line.substr(4));
    if (line.rfind("VmFlags:", 0) == 0) found.flags = line.substr(8) + " ";
  }
  if (inside) return found;
  return std::nullopt;
}

bool has_flag(const Mapping& m, const char* flag) {
  return m.flags.find(std::string(" ") + flag + " ") != std::string::npos;
}

constexpr std::size_t kBytes = std::size_t{16} << 20;

TEST(Buffer, HugePagesAdvisedUnlessSmallPagesLives) {
  const auto inner = [](const std::vector<std::byte>& v) { return v.data() + (4u << 20); };
  const std::vector<std::byte> advised = detail::allocate_bytes(kBytes);
  const std::optional<Mapping> before = mapping_of(inner(advised));
  if (!before || !has_flag(*before, "hg")) {
    GTEST_SKIP() << "no transparent huge pages to advise here";
  }
  {
    const detail::SmallPages outer;
    { const detail::SmallPages nested; }
    // Still small after the nested scope ends.
    const std::vector<std::byte> small = detail::allocate_bytes(kBytes);
    const std::optional<Mapping> m = mapping_of(inner(small));
    ASSERT_TRUE(m);
    EXPECT_TRUE(has_flag(*m, "nh")) << m->flags;
    EXPECT_FALSE(has_flag(*m, "hg")) << m->flags;
  }
  const std::vector<std::byte> after = detail::allocate_bytes(kBytes);
  const std::optional<Mapping> m = mapping_of(inner(after));
  ASSERT_TRUE(m);
  EXPECT_TRUE(has_flag(*m, "hg")) << m->flags;
}

TEST(Buffer, PopulatedPagesAreResidentBeforeTheirFirstWrite) {
#if defined(__linux__)
  // A fresh mapping of its own, in 4 KiB pages: nothing resident until populated.
  void* raw = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(raw, MAP_FAILED);
  (void)madvise(raw, kBytes, MADV_NOHUGEPAGE);
  auto* bytes = static_cast<std::byte*>(raw);
  const std::optional<Mapping> before = mapping_of(bytes + kBytes / 2);
  ASSERT_TRUE(before);
  EXPECT_EQ(before->rss_kib, 0u);
  // Unaligned ends: only the whole pages inside are touched, and all of those are.
  if (!detail::populate_for_writing(bytes + 100, kBytes - 200)) {
    munmap(raw, kBytes);
    GTEST_SKIP() << "the kernel has no MADV_POPULATE_WRITE";
  }
  const std::optional<Mapping> m = mapping_of(bytes + kBytes / 2);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->rss_kib, kBytes / 1024 - 8) << "resident KiB after populate_for_writing";
  munmap(raw, kBytes);
#else
  GTEST_SKIP() << "Linux only";
#endif
}

}  // namespace
}  // namespace kiln
