#include "core/buffer.h"

#include <algorithm>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::detail {

void fail_allocation(std::size_t count, std::size_t element_size) {
  fail<OutOfMemory>("cpu", "cannot allocate ", count, " elements of ", element_size,
                    " bytes for scratch memory");
}

namespace {
thread_local bool t_small_pages = false;
}  // namespace

SmallPages::SmallPages() noexcept : previous_(t_small_pages) { t_small_pages = true; }
SmallPages::~SmallPages() { t_small_pages = previous_; }

void advise_huge_pages(void* data, std::size_t bytes) noexcept {
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
  constexpr std::uintptr_t kMask = kHugePageBytes - 1;
  const auto begin = (reinterpret_cast<std::uintptr_t>(data) + kMask) & ~kMask;
  const auto end = (reinterpret_cast<std::uintptr_t>(data) + bytes) & ~kMask;
  // Advice only: refused (no transparent huge pages), the memory stays in ordinary pages. Under
  // SmallPages the opposite advice, for kernels that give huge pages unasked ("always" mode).
  if (end > begin) {
    (void)madvise(reinterpret_cast<void*>(begin), end - begin,
                  t_small_pages ? MADV_NOHUGEPAGE : MADV_HUGEPAGE);
  }
#else
  (void)data;
  (void)bytes;
#endif
}

bool populate_for_writing(void* data, std::size_t bytes) noexcept {
#if defined(MADV_POPULATE_WRITE)
  constexpr std::uintptr_t kPage = 4096;
  const auto begin = (reinterpret_cast<std::uintptr_t>(data) + kPage - 1) & ~(kPage - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(data) + bytes) & ~(kPage - 1);
  return end <= begin ||
         madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0;
#else
  (void)data;
  (void)bytes;
  return false;
#endif
}

std::vector<std::byte> allocate_bytes(std::size_t bytes, std::span<const std::byte> initial) {
  if (bytes > kMaxHostAllocationBytes) {
    fail<OutOfMemory>("cpu", "cannot allocate ", bytes, " bytes of host memory");
  }
  try {
    // Reserved first, advised, then filled: the copy and the zeroing are the first touch of
    // every page.
    std::vector<std::byte> out;
    out.reserve(bytes);
    advise_huge_pages(out.data(), bytes);
    out.insert(out.end(), initial.begin(), initial.begin() + std::min(initial.size(), bytes));
    out.resize(bytes);
    return out;
  } catch (const std::bad_alloc&) {
    fail<OutOfMemory>("cpu", "cannot allocate ", bytes, " bytes of host memory");
  } catch (const std::length_error&) {
    fail<OutOfMemory>("cpu", "cannot allocate ", bytes, " bytes of host memory");
  }
}

}  // namespace kiln::detail
