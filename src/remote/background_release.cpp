#include "remote/background_release.h"

#include <utility>

namespace kiln::remote {

BackgroundRelease::~BackgroundRelease() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void BackgroundRelease::release(std::vector<std::byte> bytes) {
  if (bytes.capacity() < kMinBytes) return;  // freed here, on return
  std::unique_lock lock(mutex_);
  if (queued_bytes_ + bytes.capacity() > kMaxQueuedBytes) return;
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  queued_bytes_ += bytes.capacity();
  queue_.push_back(std::move(bytes));
  lock.unlock();
  ready_.notify_one();
}

void BackgroundRelease::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to free
    std::vector<std::vector<std::byte>> taken = std::move(queue_);
    queue_.clear();
    std::size_t taken_bytes = 0;
    for (const auto& bytes : taken) taken_bytes += bytes.capacity();
    lock.unlock();
    taken.clear();  // the frees themselves, outside the lock
    lock.lock();
    queued_bytes_ -= taken_bytes;
  }
}

}  // namespace kiln::remote
