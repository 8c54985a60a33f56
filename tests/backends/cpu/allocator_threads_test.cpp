// The CPU caching allocator used from several threads at once: blocks freed by one thread are
// handed to another, so a block must never be held by two threads at the same time. Each thread
// stamps every block it holds with its own pattern and checks the stamp before freeing it.
// Under ThreadSanitizer (./run tsan) this also checks that the free lists' spin lock orders the
// hand-over of a block from one thread to the next.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/allocator.h"
#include "support/threads.h"

namespace kiln {
namespace {

struct Held {
  std::byte* data = nullptr;
  std::size_t capacity = 0;
  std::size_t bytes = 0;
  std::uint8_t stamp = 0;
};

bool stamp_intact(const Held& block) {
  return std::all_of(block.data, block.data + block.bytes,
                     [&](std::byte b) { return std::to_integer<std::uint8_t>(b) == block.stamp; });
}

TEST(CpuAllocatorThreads, NoBlockIsHeldByTwoThreads) {
  constexpr int kThreads = 4, kRounds = 3000, kHeld = 6;
  // Few sizes from few classes, so the threads keep taking one another's freed blocks.
  constexpr std::size_t kSizes[] = {64, 100, 1000, 4096, 5000};
  auto& allocator = cpu::CachingAllocator::instance();
  const std::int64_t in_use_before = allocator.stats().bytes_in_use;

  test::ThreadFailures failures(kThreads);
  test::run_together(kThreads, [&](int id) {
    std::uint32_t state = 12345u + static_cast<std::uint32_t>(id);
    auto next = [&] { return state = state * 1664525u + 1013904223u; };
    std::vector<Held> held;
    auto release = [&](std::size_t i, int round) {
      if (!stamp_intact(held[i])) {
        failures.add(id, "round " + std::to_string(round) + ": a block of " +
                             std::to_string(held[i].bytes) + " bytes was written by someone else");
      }
      allocator.deallocate(held[i].data, held[i].capacity);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
    };
    for (int round = 0; round < kRounds; ++round) {
      if (held.size() == kHeld || (!held.empty() && next() % 3 == 0)) {
        release(next() % held.size(), round);
      }
      Held block;
      block.bytes = kSizes[next() % std::size(kSizes)];
      block.stamp = static_cast<std::uint8_t>(id * 50 + round % 50 + 1);
      block.data = allocator.allocate(block.bytes, block.capacity);
      std::memset(block.data, block.stamp, block.bytes);
      held.push_back(block);
      // One thread also empties the cache now and then, freeing blocks the others just gave back.
      if (id == 0 && round % 500 == 0) allocator.release_cache();
    }
    while (!held.empty()) release(held.size() - 1, kRounds);
  });
  failures.expect_none();
  EXPECT_EQ(allocator.stats().bytes_in_use, in_use_before) << "every block was given back";
}

}  // namespace
}  // namespace kiln
