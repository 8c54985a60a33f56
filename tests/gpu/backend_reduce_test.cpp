// Reductions on shapes large enough for the chunked paths (long lines split over many blocks or
// threads, then combined), against the CPU backend on the same data.
#include <cmath>

#include "gpu/gpu_test_support.h"

using namespace kiln;

namespace {

// Elements where either side is NaN are not compared (the inputs here have none).
void expect_near_unless_nan(const TensorData& got, const TensorData& want, double tolerance,
                            const char* what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = got.to_f64_vec(), w = want.to_f64_vec();
  int reported = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (std::fabs(g[i] - w[i]) > tolerance * (1 + std::fabs(w[i])) && reported++ < 5) {
      ADD_FAILURE() << what << " element " << i << ": " << g[i] << " vs " << w[i];
    }
  }
}

}  // namespace

TEST(GpuReduce, ChunkedPathsMatchTheCpu) {
  KILN_REQUIRE_GPU();
  device.seed(7);
  auto gpu = Tensor<2>::random({3000, 5000}, Distribution::normal(0, 1), device);
  auto cpu = gpu.to_device(Device::cpu());
  for (int dim : {0, 1}) {
    expect_near_unless_nan(gpu.sum_dim(dim).into_data(), cpu.sum_dim(dim).into_data(), 1e-5,
                           "sum_dim");
    expect_near_unless_nan(gpu.max_dim(dim).into_data(), cpu.max_dim(dim).into_data(), 0,
                           "max_dim");
    expect_near_unless_nan(gpu.min_dim(dim).into_data(), cpu.min_dim(dim).into_data(), 0,
                           "min_dim");
    expect_near_unless_nan(gpu.argmax(dim).into_data(), cpu.argmax(dim).into_data(), 0, "argmax");
    expect_near_unless_nan(gpu.argmin(dim).into_data(), cpu.argmin(dim).into_data(), 0, "argmin");
    expect_near_unless_nan(gpu.mean_dim(dim).into_data(), cpu.mean_dim(dim).into_data(), 1e-5,
                           "mean_dim");
  }
  expect_near_unless_nan(gpu.sum().into_data(), cpu.sum().into_data(), 1e-5, "sum");
  expect_near_unless_nan(gpu.max().into_data(), cpu.max().into_data(), 0, "max");
  // Ties: every element equal, the first index wins on both devices.
  auto flat = Tensor<2>::ones({64, 100000}, device);
  EXPECT_EQ(flat.argmax(1).into_data().to_vec<std::int64_t>(), std::vector<std::int64_t>(64, 0));
  auto tall = Tensor<2>::ones({100000, 64}, device);
  EXPECT_EQ(tall.argmin(0).into_data().to_vec<std::int64_t>(), std::vector<std::int64_t>(64, 0));
  // Integers wrap in 64 bits, as on the CPU.
  auto ints = Tensor<2, Int>::random({2000, 3000}, Distribution::uniform(-1000, 1000), device);
  auto ints_cpu = ints.to_device(Device::cpu());
  for (int dim : {0, 1}) {
    expect_near_unless_nan(ints.sum_dim(dim).into_data(), ints_cpu.sum_dim(dim).into_data(), 0,
                           "int sum_dim");
  }
}
