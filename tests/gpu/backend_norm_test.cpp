// layer_norm's generated kernels (src/backends/cuda/cuda_norm.cpp) against the CPU backend: every
// float dtype; rows held in registers (several rows per block, a warp per row, up to 1,024
// threads per row; 16-byte and scalar loads) and rows that stream (wider than the registers
// hold); a transposed input, strided and unaligned parameters, no beta, a large mean, an empty
// tensor.
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
    for (const std::int64_t width : {1, 7, 300, 1030, 4096, 5000, 32768, 40000}) {
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
  // gamma every other element of a row (stride 2: scalar loads) and beta from an odd offset (not
  // 16-byte aligned), on rows that take wide loads.
  const Tensor<2> x = random_cpu({9, 512}, DType::F32, 6, -2, 2);
  const Tensor<1> gamma2 = random_row(1024, DType::F32, 7).slice({Slice(0, std::nullopt, 2)});
  const Tensor<1> beta1 = random_row(513, DType::F32, 8).slice({Slice(1, std::nullopt)});
  expect_close(module::layer_norm(x.to_device(device), gamma2.to_device(device),
                                  beta1.to_device(device), 1e-5),
               module::layer_norm(x, gamma2, beta1, 1e-5), 1e-5, "strided gamma, offset beta");
  const Tensor<2> empty = Tensor<2>::zeros({0, 40}, device);
  EXPECT_EQ(module::layer_norm(empty, gamma.to_device(device), std::nullopt, 1e-5).shape(),
            (Shape{0, 40}));
}
