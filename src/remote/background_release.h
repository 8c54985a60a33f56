// Frees large host buffers on a thread of its own. Giving 64 MB back to the kernel takes about
// 5 ms on the development machine (16,384 pages unmapped, as long as hashing them), which the
// caller of an upload should not wait for: its tensor is already on its way to the server.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::remote {

class BackgroundRelease {
 public:
  BackgroundRelease() = default;
  BackgroundRelease(const BackgroundRelease&) = delete;
  BackgroundRelease& operator=(const BackgroundRelease&) = delete;
  // Frees what is still queued, then ends the thread.
  ~BackgroundRelease();

  // Frees bytes on the thread (started on first use), or here when they are small or the queue
  // already holds kMaxQueuedBytes (a caller faster than the thread waits for it that way).
  void release(std::vector<std::byte> bytes);

  static constexpr std::size_t kMinBytes = std::size_t{1} << 20;
  static constexpr std::size_t kMaxQueuedBytes = std::size_t{1} << 30;

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<std::vector<std::byte>> queue_;
  std::size_t queued_bytes_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kiln::remote
