// The CPU caching allocator. Freed blocks are kept by size class and handed out again, so eager
// code that makes a temporary per op pays no fresh page faults (a first touch of a 4 KiB page
// costs ~15 us on the development machine: 64 MiB of new memory is ~250 ms of faults).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kiln/device.h"

namespace kiln::cpu {

class CachingAllocator {
 public:
  // 64-byte aligned memory for at least bytes bytes; OutOfMemory if none can be had even after
  // releasing the cache.
  std::byte* allocate(std::size_t bytes, std::size_t& capacity);
  void deallocate(std::byte* data, std::size_t capacity) noexcept;
  // Frees every cached block.
  void release_cache() noexcept;
  MemoryStats stats() const noexcept;
  void reset_peak() noexcept;

  static CachingAllocator& instance();

 private:
  CachingAllocator() = default;
};

// A block of CPU memory shared by the views of one tensor.
class CpuStorage {
 public:
  explicit CpuStorage(std::size_t bytes)
      : data_(CachingAllocator::instance().allocate(bytes, capacity_)), bytes_(bytes) {}
  ~CpuStorage() { CachingAllocator::instance().deallocate(data_, capacity_); }
  CpuStorage(const CpuStorage&) = delete;
  CpuStorage& operator=(const CpuStorage&) = delete;

  std::byte* data() const noexcept { return data_; }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  std::size_t capacity_ = 0;
  std::byte* data_;
  std::size_t bytes_;
};

}  // namespace kiln::cpu
