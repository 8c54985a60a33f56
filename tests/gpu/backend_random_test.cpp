// Counter-based random numbers: seeded, reproducible, and the same stream as the CPU backend.
#include "gpu/gpu_test_support.h"

using namespace kiln;

TEST(GpuRandom, SeededAndEqualToTheCpu) {
  KILN_REQUIRE_GPU();
  for (const Distribution& dist : {Distribution::standard(), Distribution::uniform(-2, 5),
                                   Distribution::normal(1, 3), Distribution::bernoulli(0.3)}) {
    device.seed(42);
    Device::cpu().seed(42);
    const auto gpu =
        Tensor<1>::random({4096}, dist, device, DType::F64).into_data().to_vec<double>();
    const auto cpu =
        Tensor<1>::random({4096}, dist, Device::cpu(), DType::F64).into_data().to_vec<double>();
    for (std::size_t i = 0; i < gpu.size(); ++i) ASSERT_NEAR(gpu[i], cpu[i], 1e-12) << i;
    device.seed(42);
    const auto again =
        Tensor<1>::random({4096}, dist, device, DType::F64).into_data().to_vec<double>();
    EXPECT_EQ(again, gpu);
  }
  auto ints = Tensor<1, Int>::random({1000}, Distribution::uniform(0, 10), device).into_data();
  for (double v : ints.to_f64_vec()) EXPECT_TRUE(v >= 0 && v < 10) << v;
}
