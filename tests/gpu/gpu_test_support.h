// Shared by the GPU tests: the device under test, or a clean skip saying why there is none.
#pragma once

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <optional>
#include <string>

#include "backend/cuda_plugin.h"

namespace kiln::test {

// cuda:0 when usable; otherwise nullopt and reason says why.
inline std::optional<Device> first_gpu(std::string& reason) {
  if (cuda_device_count(&reason) == 0) return std::nullopt;
  return Device::cuda(0);
}

inline KernelCacheStats kernel_stats(const Device& device) {
  return cuda_plugin(nullptr)->kernel_cache_stats(device.index());
}

}  // namespace kiln::test

// Declares `device` (cuda:0) or skips the test with the reason.
#define KILN_REQUIRE_GPU()                                                      \
  std::string kiln_gpu_reason;                                                  \
  const auto kiln_gpu = ::kiln::test::first_gpu(kiln_gpu_reason);               \
  if (!kiln_gpu) GTEST_SKIP() << "no CUDA device: " << kiln_gpu_reason;         \
  [[maybe_unused]] const ::kiln::Device device = *kiln_gpu
