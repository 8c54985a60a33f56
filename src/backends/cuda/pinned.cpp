#include "backends/cuda/pinned.h"

#include "backends/cuda/check.h"
#include "backends/cuda/shutdown.h"

namespace kiln::cuda {

namespace {
// Beyond this much cached, released buffers are unpinned instead (pinned memory is scarce).
constexpr std::size_t kMaxCachedBytes = std::size_t(1) << 30;
}  // namespace

PinnedPool& PinnedPool::instance() {
  // Never destroyed: buffers may come back from futures released during exit.
  static auto& pool = *new PinnedPool();
  return pool;
}

PinnedPool::Handle PinnedPool::acquire(std::size_t bytes) {
  const std::size_t size = std::max<std::size_t>(4096, (bytes + 4095) / 4096 * 4096);
  Buffer* buffer = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto it = free_.lower_bound(size);
    if (it != free_.end() && it->first <= size * 2) {
      buffer = new Buffer{it->second, it->first};
      cached_bytes_ -= it->first;
      free_.erase(it);
    }
  }
  if (buffer == nullptr) {
    void* host = nullptr;
    // Portable: reads of any GPU of the process may land in it.
    KILN_CUDA_CHECK("into_data", cuMemHostAlloc(&host, size, CU_MEMHOSTALLOC_PORTABLE));
    buffer = new Buffer{static_cast<std::byte*>(host), size};
  }
  return Handle(buffer, [this](Buffer* b) { release(b); });
}

void PinnedPool::release(Buffer* buffer) noexcept {
  std::unique_ptr<Buffer> owned(buffer);
  std::lock_guard lock(mutex_);
  if (cached_bytes_ + buffer->capacity <= kMaxCachedBytes) {
    free_.emplace(buffer->capacity, buffer->data);
    cached_bytes_ += buffer->capacity;
  } else if (!shutdown::exiting()) {
    cuMemFreeHost(buffer->data);
  }  // else a future released while the process ends: the driver may be gone (shutdown.h)
}

}  // namespace kiln::cuda
