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
  // cuLaunchKernelEx with programmatic stream serialisation (dispatcher.h's LaunchOrder)
  bool programmatic = false;
};

// Launches handed to the driver since it started (or since the last reset).
std::int64_t launch_count();
// Host time each cuLaunchKernel spends, in microseconds (KILN_FAKE_CUDA_LAUNCH_US at cuInit).
void set_launch_microseconds(int microseconds);
// Starts recording each launch (clearing the record); launch_log() returns it.
void record_launches();
std::vector<LaunchRecord> launch_log();

// Stream captures: refused (as a driver without graphs would) unless simulated. A simulated
// capture keeps the captured launches as nodes with the nodes each comes after, and answers
// cuStreamGetCaptureInfo and cuStreamUpdateCaptureDependencies (SET) as the driver documents;
// cuStreamEndCapture gives no graph (nullptr) and succeeds. Node handles are the nodes' positions
// plus one in the capture, so a later capture's handles repeat an earlier one's.
struct CapturedNode {
  std::uint64_t first_word = 0;    // of the launch's parameter block
  std::vector<std::size_t> after;  // positions of the nodes this one depends on
};
void simulate_captures(bool on);
// The nodes of the current or last simulated capture.
std::vector<CapturedNode> captured_nodes();

}  // namespace kiln::fake_cuda
