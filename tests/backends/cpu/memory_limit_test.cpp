// KILN_CPU_MEMORY_LIMIT caps the CPU backend's tensor memory: past it an allocation is
// OutOfMemory and the process keeps working. The variable is read once, so this test runs in its
// own ctest entry with the variable set (tests/CMakeLists.txt) and skips elsewhere.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstdlib>
#include <string>

namespace kiln {
namespace {

TEST(MemoryLimit, AllocationsPastTheLimitAreOutOfMemory) {
  const char* limit = std::getenv("KILN_CPU_MEMORY_LIMIT");
  if (limit == nullptr || std::string(limit) != "16777216") {
    GTEST_SKIP() << "runs as cpu.memory_limit with KILN_CPU_MEMORY_LIMIT=16777216";
  }
  const Device cpu = Device::cpu();
  // 8 MiB fits; a second 8 MiB beside it does not (the allocator rounds up to its size class).
  auto first = Tensor<1>::ones({2 * 1024 * 1024}, cpu);
  EXPECT_THROW((void)Tensor<1>::ones({3 * 1024 * 1024}, cpu), OutOfMemory);
  // A legal expand materialised past the limit is refused the same way.
  auto wide = Tensor<1>::ones({1}, cpu).expand<1>(Shape{std::int64_t{1} << 30});
  try {
    (void)wide.exp();
    ADD_FAILURE() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("KILN_CPU_MEMORY_LIMIT"), std::string::npos) << e.what();
  }
  // The refused requests took nothing: the first tensor is intact and more small work runs.
  EXPECT_EQ(first.sum().into_scalar<double>(), 2.0 * 1024 * 1024);
  first = Tensor<1>::ones({1}, cpu);
  EXPECT_EQ(Tensor<1>::ones({3 * 1024 * 1024}, cpu).sum().into_scalar<double>(), 3.0 * 1024 * 1024);
}

}  // namespace
}  // namespace kiln
