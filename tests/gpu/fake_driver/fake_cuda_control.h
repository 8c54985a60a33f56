// What tests linked directly against the fake driver (fake_cuda.cpp) can ask of it besides the
// driver API: the launches it was handed, and the cost of each.
#pragma once

#include <cstdint>
#include <thread>
#include <vector>

namespace kiln::fake_cuda {

struct LaunchRecord {
  std::uint64_t first_word;  // the first 8 bytes of the launch's parameter block
  std::thread::id thread;    // the thread that called cuLaunchKernel
};

// Launches handed to the driver since it started (or since the last reset).
std::int64_t launch_count();
// Host time each cuLaunchKernel spends, in microseconds (KILN_FAKE_CUDA_LAUNCH_US at cuInit).
void set_launch_microseconds(int microseconds);
// Starts recording each launch (clearing the record); launch_log() returns it.
void record_launches();
std::vector<LaunchRecord> launch_log();

}  // namespace kiln::fake_cuda
