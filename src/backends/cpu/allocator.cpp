#include "backends/cpu/allocator.h"

#include <atomic>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "core/buffer.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::cpu {
namespace {

constexpr std::size_t kAlignment = 64;
constexpr std::size_t kMinBlock = 64;
constexpr std::size_t kClasses = 4 * 64 + 8;

// Size classes: four steps per power of two (1, 1.25, 1.5, 1.75 x 2^k), so a block wastes at
// most 25% and a same-size request always finds the block it freed.
std::size_t round_up(std::size_t bytes) {
  if (bytes <= kMinBlock) return kMinBlock;
  const unsigned k = 63 - std::countl_zero(static_cast<std::uint64_t>(bytes));  // 2^k <= bytes
  const std::size_t base = std::size_t{1} << k;
  const std::size_t quarter = base / 4;
  const std::size_t step = (bytes - base + quarter - 1) / quarter;  // 0..4
  const std::size_t capacity = base + step * quarter;
  return (capacity + kAlignment - 1) / kAlignment * kAlignment;
}

// The class of a rounded capacity (round_up(capacity) == capacity).
std::size_t class_of(std::size_t capacity) {
  if (capacity <= kMinBlock) return 0;
  const unsigned k = 63 - std::countl_zero(static_cast<std::uint64_t>(capacity));
  const std::size_t base = std::size_t{1} << k;
  const std::size_t quarter = std::max<std::size_t>(base / 4, 1);
  return k * 4 + (capacity - base) / quarter;
}

std::size_t capacity_of_class(std::size_t cls) {
  if (cls == 0) return kMinBlock;
  const std::size_t base = std::size_t{1} << (cls / 4);
  return round_up(base + (cls % 4) * (base / 4));
}

// The free lists are held for a few instructions at a time, so a spinning lock is cheaper than
// a mutex's system-call path; it yields if it ever has to wait.
class SpinLock {
 public:
  void lock() noexcept {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) std::this_thread::yield();
    }
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

struct State {
  SpinLock mutex;
  std::vector<std::vector<std::byte*>> free_blocks = std::vector<std::vector<std::byte*>>(kClasses);
  std::atomic<std::int64_t> in_use{0};
  std::atomic<std::int64_t> reserved{0};
  std::atomic<std::int64_t> peak{0};
};

State& state() {
  static State* s = new State();  // lives past static teardown: tensors may outlive main
  return *s;
}

// KILN_CPU_MEMORY_LIMIT: the most bytes of tensor memory in use at once (a plain byte count;
// unset or 0 for no limit). Past it an allocation is OutOfMemory, as when the system refuses.
std::uint64_t memory_limit() {
  static const std::uint64_t limit = [] {
    const char* text = std::getenv("KILN_CPU_MEMORY_LIMIT");
    if (text == nullptr || *text == '\0') return std::uint64_t{0};
    char* end = nullptr;
    const unsigned long long value = std::strtoull(text, &end, 10);
    return *end == '\0' ? static_cast<std::uint64_t>(value) : std::uint64_t{0};
  }();
  return limit;
}

// A fresh page costs a fault at its first touch (about 15 us a 4 KiB page on the machines kiln is
// developed on): a model's weights copied in at load, or a large activation's first use, pay
// one per 4 KiB. Blocks of at least a huge page are aligned to one and offered to the kernel's
// transparent huge pages (which honours the advice in its default "madvise" mode), so they
// fault once per 2 MiB instead. A virtual machine that hands free memory back to its host (the
// development VM, a Firecracker guest reporting free 8 MiB blocks) makes a huge page split from
// such a block the dearer first touch (150-200 ms per 64 MiB against 35 ms in 4 KiB pages, the
// host faulting each of its pages in); the advice stays, since streaming ops over large tensors
// ran 2-15% faster on huge pages there (chain8 and fma_exp fused, add, 4096^2 f32), but for
// memory filled once as bytes arrive, allocated under detail::SmallPages (a server's uploads).
void* allocate_block(std::size_t capacity) {
  if (capacity < detail::kHugePageBytes) return std::aligned_alloc(kAlignment, capacity);
  void* block = nullptr;
  if (posix_memalign(&block, detail::kHugePageBytes, capacity) != 0) return nullptr;
  detail::advise_huge_pages(block, capacity);
  return block;
}

void note_in_use(State& s, std::int64_t delta) {
  const std::int64_t now = s.in_use.fetch_add(delta, std::memory_order_relaxed) + delta;
  std::int64_t peak = s.peak.load(std::memory_order_relaxed);
  while (now > peak && !s.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

}  // namespace

CachingAllocator& CachingAllocator::instance() {
  static CachingAllocator* allocator = new CachingAllocator();
  return *allocator;
}

std::byte* CachingAllocator::allocate(std::size_t bytes, std::size_t& capacity) {
  State& s = state();
  capacity = round_up(bytes);
  const std::size_t cls = class_of(capacity);
  const std::uint64_t limit = memory_limit();
  if (limit != 0 &&
      static_cast<std::uint64_t>(s.in_use.load(std::memory_order_relaxed)) + capacity > limit) {
    detail::fail<OutOfMemory>("cpu", "cannot allocate ", bytes,
                              " bytes: ", s.in_use.load(std::memory_order_relaxed),
                              " bytes are in use and KILN_CPU_MEMORY_LIMIT is ", limit);
  }
  note_in_use(s, static_cast<std::int64_t>(capacity));
  {
    std::lock_guard lock(s.mutex);
    auto& list = s.free_blocks[cls];
    if (!list.empty()) {
      std::byte* block = list.back();
      list.pop_back();
      return block;
    }
  }
  void* block = allocate_block(capacity);
  if (block == nullptr) {
    release_cache();
    block = allocate_block(capacity);
  }
  if (block == nullptr) {
    s.in_use.fetch_sub(static_cast<std::int64_t>(capacity), std::memory_order_relaxed);
    detail::fail<OutOfMemory>("cpu", "cannot allocate ", bytes, " bytes");
  }
  s.reserved.fetch_add(static_cast<std::int64_t>(capacity), std::memory_order_relaxed);
  return static_cast<std::byte*>(block);
}

void CachingAllocator::deallocate(std::byte* data, std::size_t capacity) noexcept {
  if (data == nullptr) return;
  State& s = state();
  const std::size_t cls = class_of(capacity);
  s.in_use.fetch_sub(static_cast<std::int64_t>(capacity), std::memory_order_relaxed);
  std::lock_guard lock(s.mutex);
  try {
    s.free_blocks[cls].push_back(data);
  } catch (...) {
    s.reserved.fetch_sub(static_cast<std::int64_t>(capacity), std::memory_order_relaxed);
    std::free(data);
  }
}

void CachingAllocator::release_cache() noexcept {
  State& s = state();
  std::int64_t released = 0;
  std::lock_guard lock(s.mutex);
  for (std::size_t c = 0; c < kClasses; ++c) {
    for (std::byte* block : s.free_blocks[c]) {
      std::free(block);
      released += static_cast<std::int64_t>(capacity_of_class(c));
    }
    s.free_blocks[c].clear();
  }
  s.reserved.fetch_sub(released, std::memory_order_relaxed);
}

void CachingAllocator::reset_peak() noexcept {
  State& s = state();
  s.peak.store(s.in_use.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

MemoryStats CachingAllocator::stats() const noexcept {
  State& s = state();
  MemoryStats out;
  out.bytes_in_use = s.in_use.load(std::memory_order_relaxed);
  out.bytes_reserved = s.reserved.load(std::memory_order_relaxed);
  out.peak_bytes_in_use = s.peak.load(std::memory_order_relaxed);
  return out;
}

}  // namespace kiln::cpu
