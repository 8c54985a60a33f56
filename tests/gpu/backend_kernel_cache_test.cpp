// The NVRTC kernel caches: the memory cache, the disk cache (a second process pays no compile),
// and what each level costs. The timings printed here are the benchmark figures for the
// first-run NVRTC cost per kernel and the warm disk-cache cost.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "gpu/gpu_test_support.h"
#include "support/process_maps.h"

using namespace kiln;

namespace {

// A handful of kernels no other test uses (u16 arithmetic, an unusual constant).
void distinct_work(const Device& device) {
  auto x = Tensor<1, Int>::arange(0, 1000, device).cast(DType::U16);
  auto y = ((x * 7) + 12345) % 1031;
  (void)y.sum().into_data();
}

}  // namespace

// Child: runs distinct_work in a fresh process and writes its kernel statistics to a file.
TEST(GpuKernelCacheChild, Work) {
  const char* report = std::getenv("KILN_CACHE_REPORT");
  if (report == nullptr) GTEST_SKIP() << "runs only as a child process";
  KILN_REQUIRE_GPU();
  const auto start = std::chrono::steady_clock::now();
  distinct_work(device);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const KernelCacheStats s = test::kernel_stats(device);
  std::ofstream(report) << s.compiles << " " << s.disk_hits << " " << s.compile_seconds << " "
                        << s.disk_load_seconds << " " << seconds << "\n";
}

TEST(GpuKernelCache, SecondProcessPaysNoCompile) {
  KILN_REQUIRE_GPU();
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kiln-cache-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  struct Run {
    long compiles = -1, disk_hits = -1;
    double compile_s = 0, load_s = 0, total_s = 0;
  };
  auto run = [&](const char* name) {
    const auto report = dir / name;
    const std::string env = "XDG_CACHE_HOME='" + dir.string() + "' KILN_CACHE_REPORT='" + report.string() + "'";
    EXPECT_EQ(test::run_self("GpuKernelCacheChild.Work", env), 0);
    Run r;
    std::ifstream(report) >> r.compiles >> r.disk_hits >> r.compile_s >> r.load_s >> r.total_s;
    return r;
  };
  const Run cold = run("cold");
  const Run warm = run("warm");
  EXPECT_GT(cold.compiles, 0);
  EXPECT_EQ(warm.compiles, 0) << "the second process compiled again";
  EXPECT_EQ(warm.disk_hits, cold.compiles);
  EXPECT_TRUE(std::filesystem::exists(dir / "kiln" / "cuda"));
  if (cold.compiles > 0 && warm.disk_hits > 0) {
    std::printf("[kernel cache] NVRTC first run: %.1f ms per kernel (%ld kernels); "
                "disk cache: %.2f ms per kernel; process work %.3f s cold, %.3f s warm\n",
                1000 * cold.compile_s / cold.compiles, cold.compiles,
                1000 * warm.load_s / warm.disk_hits, cold.total_s, warm.total_s);
  }
  // A corrupt entry is recompiled, not trusted.
  for (const auto& entry : std::filesystem::directory_iterator(dir / "kiln" / "cuda")) {
    std::ofstream(entry.path(), std::ios::binary | std::ios::trunc) << "garbage";
  }
  const Run corrupt = run("corrupt");
  EXPECT_EQ(corrupt.compiles, cold.compiles);
  std::filesystem::remove_all(dir);
}

TEST(GpuKernelCache, MemoryCacheThenDisk) {
  KILN_REQUIRE_GPU();
  auto x = Tensor<1>::ones({64}, device);
  (void)(x * 3.25).into_data();  // compiled or loaded once
  const KernelCacheStats first = test::kernel_stats(device);
  (void)(x * 3.25).into_data();
  const KernelCacheStats again = test::kernel_stats(device);
  EXPECT_EQ(again.compiles, first.compiles);
  EXPECT_EQ(again.disk_hits, first.disk_hits);
  EXPECT_GT(again.memory_hits, first.memory_hits);
  cuda_plugin(nullptr)->clear_kernel_memory_cache(device.index());
  (void)(x * 3.25).into_data();
  const KernelCacheStats reloaded = test::kernel_stats(device);
  EXPECT_EQ(reloaded.compiles, first.compiles) << "the disk cache should have served it";
  EXPECT_GT(reloaded.disk_hits, first.disk_hits);
}
