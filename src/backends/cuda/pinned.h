// Page-locked host buffers for device-to-host reads. cuMemcpyDtoHAsync is only asynchronous
// into pinned memory, and pinning is slow (a driver call that maps pages), so buffers are
// cached by size and reused.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

namespace kiln::cuda {

class PinnedPool {
 public:
  struct Buffer {
    std::byte* data = nullptr;
    std::size_t capacity = 0;
  };
  using Handle = std::shared_ptr<Buffer>;  // returns the buffer to the pool when released

  // A buffer of at least bytes (OutOfMemory if none can be pinned).
  Handle acquire(std::size_t bytes);
  static PinnedPool& instance();

 private:
  void release(Buffer* buffer) noexcept;

  std::mutex mutex_;
  std::multimap<std::size_t, std::byte*> free_;
  std::size_t cached_bytes_ = 0;
};

}  // namespace kiln::cuda
