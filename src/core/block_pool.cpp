#include "core/block_pool.h"

#include <array>
#include <cstdlib>

namespace kiln {
namespace {

constexpr std::size_t kGranule = 64;
constexpr std::size_t kClasses = 16;              // blocks up to 1 KiB
constexpr std::size_t kMaxCachedPerClass = 4096;  // beyond this, blocks go back to malloc

struct FreeBlock {
  FreeBlock* next;
};

// A block freed on another thread joins that thread's pool. The lists are plain data, so reaching
// them costs no TLS guard; the first block a thread takes from malloc registers the cleanup that
// returns its pool to malloc when the thread ends.
struct Pools {
  std::array<FreeBlock*, kClasses> heads;
  std::array<std::size_t, kClasses> counts;
};
__attribute__((tls_model("initial-exec"))) thread_local Pools pools{};

struct PoolCleanup {
  void arm() noexcept {}
  ~PoolCleanup() {
    for (FreeBlock*& head : pools.heads) {
      while (head != nullptr) {
        FreeBlock* next = head->next;
        std::free(head);
        head = next;
      }
    }
    pools.counts = {};
  }
};
thread_local PoolCleanup cleanup;

std::size_t class_of(std::size_t bytes) noexcept { return (bytes + kGranule - 1) / kGranule - 1; }

}  // namespace

void* pool_allocate(std::size_t bytes) {
  const std::size_t c = class_of(bytes);
  if (c < kClasses) {
    if (FreeBlock* block = pools.heads[c]; block != nullptr) {
      pools.heads[c] = block->next;
      --pools.counts[c];
      return block;
    }
    cleanup.arm();
    if (void* fresh = std::malloc((c + 1) * kGranule)) return fresh;
    throw std::bad_alloc();
  }
  if (void* big = std::malloc(bytes)) return big;
  throw std::bad_alloc();
}

void pool_deallocate(void* block, std::size_t bytes) noexcept {
  const std::size_t c = class_of(bytes);
  if (c < kClasses && pools.counts[c] < kMaxCachedPerClass) {
    auto* free_block = static_cast<FreeBlock*>(block);
    free_block->next = pools.heads[c];
    pools.heads[c] = free_block;
    ++pools.counts[c];
    return;
  }
  std::free(block);
}

}  // namespace kiln
