// The fusion decorator on cuda:0 (src/backends/cuda/cuda_fused.cpp): a group's elementwise steps
// run as one generated kernel whose results equal the unfused device's, with transposed and
// broadcast operands, comparisons and masks: bit for bit where every value is rounded to f16 or
// bf16 between ops, and in f32 and f64 within the error that NVRTC's contraction of one op's
// multiply and the next op's add into one fused multiply-add (one rounding instead of two) makes
// after exp and tanh (the fusion checker's tolerance); a failing
// integer op inside a fused kernel is an ExecutionError at the read naming that op; a training
// loop's groups compile once whatever their scalars and sizes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/gpu_test_support.h"

using namespace kiln;

namespace gpu_fusion_test {

Tensor<2> random_on(const Device& device, Shape shape, DType dtype, std::uint64_t seed) {
  return Tensor<2>::wrap(test::host_random(shape, dtype, seed, -2, 2)).to_device(device);
}

// Eleven ops over a [rows, 300] tensor, a transposed [300, rows] one and a broadcast [1, 300]
// row: arithmetic, scalars, transcendentals, a clamp, a comparison and a mask.
Tensor<2> chain(const Tensor<2>& x, const Tensor<2>& yt, const Tensor<2>& b, double scale) {
  const Tensor<2> y = yt.transpose();
  const Tensor<2> t = ((x * y + b).exp() * scale - x).tanh().clamp(-0.9, 0.9);
  return t.mask_where(x.greater(y), b) + y.abs().sqrt();
}

std::vector<std::byte> bytes_of(const Tensor<2>& t) {
  const TensorData data = t.into_data();
  return {data.bytes().begin(), data.bytes().end()};
}

// got equals want: bit for bit in f16 and bf16; in f32 and f64 within 1e-5 and 1e-12 of the
// value's magnitude (of 1 near zero): a contracted multiply-add's rounding, grown by exp.
void expect_equal_values(const Tensor<2>& got, const Tensor<2>& want, const std::string& what) {
  const DType dtype = want.dtype();
  if (dtype == DType::F16 || dtype == DType::BF16) {
    EXPECT_EQ(bytes_of(got), bytes_of(want)) << what;
    return;
  }
  const double tolerance = dtype == DType::F64 ? 1e-12 : 1e-5;
  const std::vector<double> g = got.into_data().to_f64_vec(), w = want.into_data().to_f64_vec();
  ASSERT_EQ(g.size(), w.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i) {
    ASSERT_LE(std::abs(g[i] - w[i]), tolerance * std::max(1.0, std::abs(w[i])))
        << what << " at " << i << ": " << g[i] << " vs " << w[i];
  }
}

}  // namespace gpu_fusion_test

TEST(GpuFusion, ChainsEqualTheUnfusedDeviceInEveryFloatDType) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  const Device fused = device.fused();
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    const Tensor<2> x = random_on(device, {64, 300}, dtype, 1);
    const Tensor<2> yt = random_on(device, {300, 64}, dtype, 2);
    const Tensor<2> b = random_on(device, {1, 300}, dtype, 3);
    const Tensor<2> want = chain(x, yt, b, 0.5);
    const Tensor<2> got = chain(x.to_device(fused), yt.to_device(fused), b.to_device(fused), 0.5);
    EXPECT_EQ(got.device(), fused);
    expect_equal_values(got, want, std::string(dtype_name(dtype)));
  }
}

TEST(GpuFusion, AGroupCompilesOnceWhateverItsScalarsAndSizes) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  const Device fused = device.fused();
  auto run = [&](std::int64_t rows, double scale) {
    const Tensor<2> x = random_on(fused, {rows, 300}, DType::F32, 4);
    const Tensor<2> yt = random_on(fused, {300, rows}, DType::F32, 5);
    const Tensor<2> b = random_on(fused, {1, 300}, DType::F32, 6);
    const Tensor<2> want =
        chain(x.to_device(device), yt.to_device(device), b.to_device(device), scale);
    expect_equal_values(chain(x, yt, b, scale), want, std::to_string(rows) + " rows");
  };
  run(64, 0.5);
  const std::int64_t compiles = device.kernel_stats().compiles;
  run(64, 0.25);
  run(96, 3.0);
  run(1000, -1.0);
  EXPECT_EQ(device.kernel_stats().compiles, compiles);
  EXPECT_EQ(fused.kernel_stats().compiles, compiles);  // one count per GPU, whatever the flags
  EXPECT_EQ(Device::cpu().kernel_stats().compiles, 0);
}

TEST(GpuFusion, AnIntegerDivisionByZeroInAFusedKernelIsAnExecutionErrorNamingTheOp) {
  KILN_REQUIRE_GPU();
  const Device fused = device.fused();
  const auto x = Tensor<1, Int>::arange(0, 6000, fused).reshape({60, 100});
  const auto zero = x - x;               // recorded: computed inside the kernel
  const auto q = (x * 3).div(zero) + 1;  // the read runs the group: x*3, x-x, div, +1
  try {
    (void)q.into_data();
    FAIL() << "no error";
  } catch (const ExecutionError& error) {
    EXPECT_NE(std::string(error.what()).find("div"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("division by zero"), std::string::npos)
        << error.what();
  }
  // The device keeps working after the error.
  const auto ok = (x * 2 + 1).into_data().to_f64_vec();
  EXPECT_EQ(ok[5999], 2.0 * 5999 + 1);
}

TEST(GpuFusion, AnElementwisePrologueThenSoftmaxEqualsTheUnfusedDevice) {
  KILN_REQUIRE_GPU();
  using namespace gpu_fusion_test;
  const Device fused = device.fused();
  const Tensor<2> x = random_on(device, {128, 1000}, DType::F32, 7);
  const Tensor<2> b = random_on(device, {1, 1000}, DType::F32, 8);
  auto f = [](const Tensor<2>& x, const Tensor<2>& b) {
    const Tensor<2> s = activation::softmax((x * 2.0 + b).tanh(), 1);
    return s * 3.0 - 1.0;  // an elementwise epilogue after the op along a dim
  };
  expect_equal_values(f(x.to_device(fused), b.to_device(fused)), f(x, b), "softmax");
}
