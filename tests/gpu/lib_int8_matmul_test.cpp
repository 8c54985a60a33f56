// kiln_cuda_lib's int8 × int8 → int32 product (lib/int8_matmul.h) against exact host sums: square
// and odd shapes, padded rows, the extreme codes (-128 · -128 summed over k), k = 0, an empty
// result; and what it refuses (checked without a GPU).
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/lib/int8_matmul.h"
#include "gpu_test_util.h"

namespace kiln::cuda::lib::int8_matmul_test {

using gpu_test::DeviceBuffer;

// C[m, n] = A[m, k] · B[n, k]ᵀ in int64 from the row-major operands.
std::vector<std::int64_t> reference(const std::vector<std::int8_t>& a,
                                    const std::vector<std::int8_t>& b, const Int8MatmulDesc& d) {
  std::vector<std::int64_t> c(static_cast<std::size_t>(d.m * d.n));
  for (std::int64_t i = 0; i < d.m; ++i) {
    for (std::int64_t j = 0; j < d.n; ++j) {
      std::int64_t sum = 0;
      for (std::int64_t p = 0; p < d.k; ++p) {
        sum += std::int64_t{a[static_cast<std::size_t>(i * d.lda + p)]} *
               b[static_cast<std::size_t>(j * d.ldb + p)];
      }
      c[static_cast<std::size_t>(i * d.n + j)] = sum;
    }
  }
  return c;
}

void expect_product(const Int8MatmulDesc& d, std::uint32_t seed, bool extremes = false) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(-128, 127);
  std::vector<std::int8_t> a(static_cast<std::size_t>(std::max<std::int64_t>(d.m * d.lda, 1)));
  std::vector<std::int8_t> b(static_cast<std::size_t>(std::max<std::int64_t>(d.n * d.ldb, 1)));
  for (auto& v : a) v = static_cast<std::int8_t>(extremes ? -128 : code(rng));
  for (auto& v : b) v = static_cast<std::int8_t>(extremes ? -128 : code(rng));
  const DeviceBuffer da(a), db(b);
  const DeviceBuffer dc(static_cast<std::size_t>(std::max<std::int64_t>(d.m * d.ldc, 1)) * 4);
  int8_matmul(d, da.get(), db.get(), dc.get(), nullptr);
  const std::vector<std::int32_t> got =
      dc.read<std::int32_t>(static_cast<std::size_t>(d.m * d.ldc));
  const std::vector<std::int64_t> want = reference(a, b, d);
  const std::string what =
      "m " + std::to_string(d.m) + " n " + std::to_string(d.n) + " k " + std::to_string(d.k);
  int reported = 0;
  for (std::int64_t i = 0; i < d.m; ++i) {
    for (std::int64_t j = 0; j < d.n; ++j) {
      const std::int64_t g = got[static_cast<std::size_t>(i * d.ldc + j)];
      const std::int64_t w = want[static_cast<std::size_t>(i * d.n + j)];
      if (g != w && reported++ < 5)
        ADD_FAILURE() << what << " at " << i << ", " << j << ": " << g << " vs " << w;
    }
  }
}

TEST(LibInt8Matmul, ExactInt32Sums) {
  KILN_REQUIRE_GPU();
  expect_product({64, 64, 64, 64, 64, 64}, 1);
  expect_product({37, 44, 128, 128, 128, 44}, 2);   // m odd
  expect_product({5, 8, 4096, 4100, 4104, 12}, 3);  // padded rows of A, B and C
  expect_product({256, 512, 1024, 1024, 1024, 512}, 4);
  expect_product({3, 4, 32768, 32768, 32768, 4}, 5, true);  // 32768 * 16384: near int32's top
}

TEST(LibInt8Matmul, EmptyProducts) {
  KILN_REQUIRE_GPU();
  // k = 0: every sum is 0 (the output is written).
  const DeviceBuffer c(8 * 4 * 4);
  int8_matmul({8, 4, 0, 0, 0, 4}, nullptr, nullptr, c.get(), nullptr);
  for (std::int32_t v : c.read<std::int32_t>(32)) EXPECT_EQ(v, 0);
  int8_matmul({0, 4, 16, 16, 16, 4}, nullptr, nullptr, nullptr, nullptr);  // nothing to write
}

TEST(LibInt8Matmul, RefusesWhatItsKernelsDoNotTake) {
  std::string why;
  EXPECT_TRUE(int8_matmul_supported({8, 8, 16, 16, 16, 8}, &why)) << why;
  EXPECT_FALSE(int8_matmul_supported({8, 8, 18, 18, 18, 8}, &why));  // k
  EXPECT_NE(why.find("multiples of 4"), std::string::npos);
  EXPECT_FALSE(int8_matmul_supported({8, 6, 16, 16, 16, 8}, &why));  // n
  EXPECT_FALSE(int8_matmul_supported({8, 8, 16, 18, 16, 8}, &why));  // lda
  EXPECT_FALSE(int8_matmul_supported({8, 8, 16, 12, 16, 8}, &why));  // lda < k
  EXPECT_FALSE(int8_matmul_supported({8, 8, 16, 16, 16, 4}, &why));  // ldc < n
  EXPECT_FALSE(int8_matmul_supported({8, 8, 1 << 18, 1 << 18, 1 << 18, 8}, &why));
  EXPECT_NE(why.find("overflow"), std::string::npos);
  EXPECT_THROW(int8_matmul({8, 8, 18, 18, 18, 8}, nullptr, nullptr, nullptr, nullptr),
               InvalidArgument);
}

}  // namespace kiln::cuda::lib::int8_matmul_test
