// The caching allocator through the public API: statistics, reuse, cleanup, peak, and out of
// memory as a typed error after which the device keeps working.
#include "gpu/gpu_test_support.h"

using namespace kiln;

TEST(GpuMemory, StatsReuseCleanupPeak) {
  KILN_REQUIRE_GPU();
  device.sync();
  device.memory_cleanup();
  const MemoryStats before = device.memory_stats();
  {
    auto a = Tensor<1>::zeros({1 << 20}, device);  // 4 MiB
    const MemoryStats held = device.memory_stats();
    EXPECT_GE(held.bytes_in_use - before.bytes_in_use, 4 << 20);
    EXPECT_GE(held.bytes_reserved, held.bytes_in_use);
    EXPECT_GE(held.peak_bytes_in_use, held.bytes_in_use);
  }
  const MemoryStats freed = device.memory_stats();
  EXPECT_EQ(freed.bytes_in_use, before.bytes_in_use);
  EXPECT_GT(freed.bytes_reserved, freed.bytes_in_use) << "the freed block should stay cached";
  {
    // Same size again: served from the cache, nothing new reserved.
    auto b = Tensor<1>::zeros({1 << 20}, device);
    EXPECT_EQ(device.memory_stats().bytes_reserved, freed.bytes_reserved);
  }
  device.memory_cleanup();
  EXPECT_EQ(device.memory_stats().bytes_reserved, device.memory_stats().bytes_in_use);
  device.reset_peak_memory();
  EXPECT_EQ(device.memory_stats().peak_bytes_in_use, device.memory_stats().bytes_in_use);
}

TEST(GpuMemory, OutOfMemoryIsTypedAndTheDeviceKeepsWorking) {
  KILN_REQUIRE_GPU();
  auto keep = Tensor<1>::ones({1024}, device);
  // Far beyond any GPU: 2^45 f32 elements (128 TiB), and a size whose byte count overflows.
  EXPECT_THROW((void)Tensor<1>::zeros({std::int64_t(1) << 45}, device), OutOfMemory);
  EXPECT_THROW((void)Tensor<2>::empty({std::int64_t(1) << 40, std::int64_t(1) << 22}, device),
               OutOfMemory);
  // Most of the real memory, twice: the second needs the cache released or fails cleanly.
  try {
    auto big = Tensor<1>::empty({std::int64_t(1) << 36}, device);  // 256 GiB > H200's 141
    ADD_FAILURE() << "256 GiB allocated";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  auto after = (keep + keep).sum();
  EXPECT_EQ(after.into_data().to_vec<float>(), std::vector<float>{2048.0f});
}
