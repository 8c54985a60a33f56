// The caching allocator of one GPU. Freed blocks are kept by size class and handed out again
// without a driver call (cuMemAlloc/cuMemFree synchronise the device and cost tens of µs).
// Reuse is stream-ordered: every op of the device runs on one stream, so a block freed on the
// host after its last use was queued can be given to an op queued later without waiting.
// Out of memory: the cache is released and the allocation retried; then OutOfMemory.
// Captured graphs (kiln/graph.h) replay kernels on the addresses they were captured with, so a
// block a graph may touch must not serve anyone else while the graph lives: from begin_pool to
// end_pool every block allocated or freed belongs to the capture's pool; freed, it goes back to
// that pool (where later allocations of the same capture find it: a graph runs its kernels in
// capture order), and the cache has it again only when the graph is gone (release_pool).
// Small blocks (the per-op case) sit in one stack per size class with a bitmap of the classes
// that hold any, so a request finds the smallest cached block that fits with a few word scans
// and a free allocates nothing (the stacks keep their capacity).
#pragma once

#include <cuda.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kiln/device.h"

namespace kiln::cuda {

class Context;

class Allocator {
 public:
  explicit Allocator(Context& context) : context_(context) {}
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // At least bytes of device memory (256-byte aligned); capacity receives the block's size.
  CUdeviceptr allocate(std::size_t bytes, std::size_t& capacity, const char* op);
  void deallocate(CUdeviceptr pointer, std::size_t capacity) noexcept;
  // Frees every cached block (waits for the stream first).
  void release_cache() noexcept;
  MemoryStats stats() const noexcept;
  void reset_peak() noexcept;

  // The blocks of one captured graph.
  struct Pool {
    std::multimap<std::size_t, CUdeviceptr> free;  // size class -> block
  };
  void begin_pool();
  std::shared_ptr<Pool> end_pool();
  // The graph is gone: its free blocks return to the cache, its blocks in use will when freed.
  void release_pool(Pool& pool) noexcept;

  // The size class of a request: 512-byte steps below 1 MiB, 2 MiB steps above (large blocks
  // are few, and rounding them finely would fragment the cache).
  static std::size_t size_class(std::size_t bytes) noexcept;

 private:
  static constexpr std::size_t kSmallLimit = std::size_t(1) << 20;
  static constexpr std::size_t kSmallStep = 512;
  static constexpr std::size_t kSmallClasses = kSmallLimit / kSmallStep;  // 512 B .. 1 MiB

  // A cached block of class size up to limit bytes, or 0 (lock held).
  CUdeviceptr take_cached(std::size_t size, std::size_t limit, std::size_t& capacity);
  void release_cache_locked() noexcept;
  // Keeps a free block for reuse (lock held).
  void cache_locked(CUdeviceptr pointer, std::size_t capacity) noexcept;

  Context& context_;
  mutable std::mutex mutex_;
  std::array<std::vector<CUdeviceptr>, kSmallClasses> small_;   // class index -> cached blocks
  std::array<std::uint64_t, kSmallClasses / 64> small_bits_{};  // bit set: that stack is not empty
  std::multimap<std::size_t, CUdeviceptr> large_;               // size class -> cached block
  std::int64_t in_use_ = 0, reserved_ = 0, peak_ = 0;
  std::shared_ptr<Pool> capturing_;                 // the pool of the capture under way
  std::unordered_map<CUdeviceptr, Pool*> pool_of_;  // blocks that belong to a live pool
};

}  // namespace kiln::cuda
