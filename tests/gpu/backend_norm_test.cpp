// layer_norm's generated kernel (src/backends/cuda/cuda_norm.cpp) against the CPU backend: every
// float dtype, rows shorter and longer than a block, a transposed input, no beta, a large mean
// (the shifted sums keep the variance), an empty tensor.
#include <cstdint>
#include <vector>

#include "gpu/gpu_test_support.h"

using namespace kiln;

namespace gpu_norm_test {

Tensor<2> random_cpu(Shape shape, DType dtype, std::uint64_t seed, double lo, double hi) {
  return Tensor<2>::wrap(test::host_random(shape, dtype, seed, lo, hi));
}
Tensor<1> random_row(std::int64_t width, DType dtype, std::uint64_t seed) {
  return Tensor<1>::wrap(test::host_random(Shape{width}, dtype, seed, 0.5, 1.5));
}

void expect_close(const Tensor<2>& got, const Tensor<2>& want, double tolerance,
                  const std::string& what) {
  const std::vector<double> g = got.into_data().to_f64_vec(), w = want.into_data().to_f64_vec();
  ASSERT_EQ(g.size(), w.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], w[i], tolerance * (1 + std::abs(w[i]))) << what << " at " << i;
  }
}

}  // namespace gpu_norm_test

TEST(GpuLayerNorm, MatchesTheCpuInEveryFloatDType) {
  KILN_REQUIRE_GPU();
  using namespace gpu_norm_test;
  for (DType dtype : test::kFloatDTypes) {
    const double tolerance = dtype == DType::F64   ? 1e-12
                             : dtype == DType::F32 ? 1e-5
                             : dtype == DType::F16 ? 2e-3
                                                   : 1.6e-2;
    for (const std::int64_t width : {1, 7, 300, 4096, 5000}) {
      const Tensor<2> x = random_cpu({33, width}, dtype, 1, -3, 5);
      const Tensor<1> gamma = random_row(width, dtype, 2), beta = random_row(width, dtype, 3);
      const Tensor<2> want = module::layer_norm(x, gamma, beta, 1e-5);
      const Tensor<2> got = module::layer_norm(x.to_device(device), gamma.to_device(device),
                                               beta.to_device(device), 1e-5);
      expect_close(got, want, tolerance,
                   std::string(dtype_name(dtype)) + " width " + std::to_string(width));
      const Tensor<2> no_beta =
          module::layer_norm(x.to_device(device), gamma.to_device(device), std::nullopt, 1e-5);
      expect_close(no_beta, module::layer_norm(x, gamma, std::nullopt, 1e-5), tolerance, "no beta");
    }
  }
}

TEST(GpuLayerNorm, TransposedInputsLargeMeansAndEmptyTensors) {
  KILN_REQUIRE_GPU();
  using namespace gpu_norm_test;
  const Tensor<2> xt = random_cpu({40, 300}, DType::F32, 4, 1e4, 1e4 + 1);  // mean 1e4, spread 1
  const Tensor<1> gamma = random_row(40, DType::F32, 5);
  const Tensor<2> want = module::layer_norm(xt.transpose(), gamma, std::nullopt, 1e-5);
  expect_close(module::layer_norm(xt.to_device(device).transpose(), gamma.to_device(device),
                                  std::nullopt, 1e-5),
               want, 1e-3, "transposed, mean 1e4");
  const Tensor<2> empty = Tensor<2>::zeros({0, 40}, device);
  EXPECT_EQ(module::layer_norm(empty, gamma.to_device(device), std::nullopt, 1e-5).shape(),
            (Shape{0, 40}));
}
