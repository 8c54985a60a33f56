// Waiting for something another thread (a server's session) does, without hanging a test that
// fails: up to kPatience, then false.
#pragma once

#include <kiln/kiln.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

namespace kiln::test {

inline constexpr auto kPatience = std::chrono::seconds(10);

inline bool wait_until(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// The CPU device's memory held by live tensors (a server in this process counts there).
inline std::int64_t cpu_bytes_in_use() { return Device::cpu().memory_stats().bytes_in_use; }

}  // namespace kiln::test
