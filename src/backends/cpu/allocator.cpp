#include "backends/cpu/allocator.h"

#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::cpu {
namespace {

constexpr std::size_t kAlignment = 64;
constexpr std::size_t kMinBlock = 64;
constexpr std::size_t kClasses = 4 * 64;

// Size classes: four steps per power of two (1, 1.25, 1.5, 1.75 x 2^k), so a block wastes at
// most 25% and a same-size request always finds the block it freed.
std::size_t size_class(std::size_t bytes, std::size_t& capacity) {
  if (bytes <= kMinBlock) {
    capacity = kMinBlock;
    return 0;
  }
  const unsigned k = 63 - std::countl_zero(static_cast<std::uint64_t>(bytes));  // 2^k <= bytes
  const std::size_t base = std::size_t{1} << k;
  const std::size_t quarter = base / 4;
  std::size_t step = (bytes - base + quarter - 1) / quarter;  // 0..4
  capacity = base + step * quarter;
  capacity = (capacity + kAlignment - 1) / kAlignment * kAlignment;
  return k * 4 + step;
}

}  // namespace

struct CachingAllocator::State {
  mutable std::mutex mutex;
  std::vector<std::vector<std::byte*>> free_blocks = std::vector<std::vector<std::byte*>>(kClasses + 8);
  MemoryStats stats;
};

CachingAllocator& CachingAllocator::instance() {
  static CachingAllocator* allocator = new CachingAllocator();  // lives past static teardown
  return *allocator;
}

CachingAllocator::State& CachingAllocator::state() const {
  static State* s = new State();
  return *s;
}

std::byte* CachingAllocator::allocate(std::size_t bytes, std::size_t& capacity) {
  State& s = state();
  size_class(bytes, capacity);
  std::size_t same = 0;
  const std::size_t cls = size_class(capacity, same);  // the class of the rounded size
  {
    std::lock_guard lock(s.mutex);
    auto& list = s.free_blocks[cls];
    s.stats.bytes_in_use += static_cast<std::int64_t>(capacity);
    if (s.stats.bytes_in_use > s.stats.peak_bytes_in_use) {
      s.stats.peak_bytes_in_use = s.stats.bytes_in_use;
    }
    if (!list.empty()) {
      std::byte* block = list.back();
      list.pop_back();
      return block;
    }
    s.stats.bytes_reserved += static_cast<std::int64_t>(capacity);
  }
  void* block = std::aligned_alloc(kAlignment, capacity);
  if (block == nullptr) {
    release_cache();
    block = std::aligned_alloc(kAlignment, capacity);
  }
  if (block == nullptr) {
    std::lock_guard lock(s.mutex);
    s.stats.bytes_in_use -= static_cast<std::int64_t>(capacity);
    s.stats.bytes_reserved -= static_cast<std::int64_t>(capacity);
    detail::fail<OutOfMemory>("cpu", "cannot allocate ", bytes, " bytes");
  }
  return static_cast<std::byte*>(block);
}

void CachingAllocator::deallocate(std::byte* data, std::size_t capacity) noexcept {
  if (data == nullptr) return;
  State& s = state();
  std::size_t ignored = 0;
  const std::size_t cls = size_class(capacity, ignored);
  std::lock_guard lock(s.mutex);
  s.stats.bytes_in_use -= static_cast<std::int64_t>(capacity);
  try {
    s.free_blocks[cls].push_back(data);
  } catch (...) {
    s.stats.bytes_reserved -= static_cast<std::int64_t>(capacity);
    std::free(data);
  }
}

void CachingAllocator::release_cache() noexcept {
  State& s = state();
  std::lock_guard lock(s.mutex);
  for (std::size_t cls = 0; cls < s.free_blocks.size(); ++cls) {
    for (std::byte* block : s.free_blocks[cls]) std::free(block);
    s.free_blocks[cls].clear();
  }
  s.stats.bytes_reserved = s.stats.bytes_in_use;
}

MemoryStats CachingAllocator::stats() const noexcept {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return s.stats;
}

}  // namespace kiln::cpu
