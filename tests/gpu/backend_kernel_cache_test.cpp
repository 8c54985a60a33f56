// The NVRTC kernel caches: the memory cache and the disk cache (a second process pays no
// compile). What each level costs is measured by bench/gpu_ops_bench (nvrtc_first_compile,
// disk_cache_load).
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
  distinct_work(device);
  const KernelCacheStats s = test::kernel_stats(device);
  std::ofstream(report) << s.compiles << " " << s.disk_hits << "\n";
}

TEST(GpuKernelCache, SecondProcessPaysNoCompile) {
  KILN_REQUIRE_GPU();
  const auto dir =
      std::filesystem::temp_directory_path() / ("kiln-cache-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  struct Run {
    long compiles = -1, disk_hits = -1;
  };
  auto run = [&](const char* name) {
    const auto report = dir / name;
    const std::string env =
        "XDG_CACHE_HOME='" + dir.string() + "' KILN_CACHE_REPORT='" + report.string() + "'";
    EXPECT_EQ(test::run_self("GpuKernelCacheChild.Work", env), 0);
    Run r;
    std::ifstream(report) >> r.compiles >> r.disk_hits;
    return r;
  };
  const Run cold = run("cold");
  const Run warm = run("warm");
  EXPECT_GT(cold.compiles, 0);
  EXPECT_EQ(warm.compiles, 0) << "the second process compiled again";
  EXPECT_EQ(warm.disk_hits, cold.compiles);
  EXPECT_TRUE(std::filesystem::exists(dir / "kiln" / "cuda"));
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
