// A per-thread pool of small blocks for the decorators' per-op objects: autodiff's graph nodes and
// primitives, fusion's recorded nodes and tensors. Every tracked or recorded op makes one of each
// and frees them when its result goes, often a whole graph's worth at once; recycling the blocks
// on the thread keeps that out of malloc, which was the largest part of a decorated op's overhead
// on small tensors.
#pragma once

#include <cstddef>
#include <new>

namespace kiln {

void* pool_allocate(std::size_t bytes);
void pool_deallocate(void* block, std::size_t bytes) noexcept;

// An allocator for std::allocate_shared drawing on the pool.
template <class T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() noexcept = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U>&) noexcept {}  // NOLINT: rebinding is implicit
  T* allocate(std::size_t n) { return static_cast<T*>(pool_allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { pool_deallocate(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const PoolAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace kiln
