// The tf32 switch (Device::set_allow_tf32) on the GPU: with it on, f32 matmul and conv run on tf32
// tensor cores and differ from a float64 reference by a tf32-sized error (inputs rounded to 10
// mantissa bits: about 4e-4 relative here); with it off (the default) they are f32-accurate,
// over a hundred times closer. The switch applies to the next op without re-creating anything.
#include <cmath>
#include <string>

#include "gpu/gpu_exact.h"
#include "gpu/gpu_test_support.h"
#include "support/scoped_env.h"

using namespace kiln;

namespace {

// ||got - want|| / ||want|| over every element (Frobenius norms).
double relative_error(const Primitive& got, const Primitive& want) {
  const auto g = detail::into_data(got).to_f64_vec();
  const auto w = detail::into_data(want).to_f64_vec();
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    diff += (g[i] - w[i]) * (g[i] - w[i]);
    norm += w[i] * w[i];
  }
  return std::sqrt(diff / norm);
}

Primitive uniform(const Shape& shape, std::uint64_t seed) {
  Device::cpu().seed(seed);
  return detail::random(shape, Distribution::uniform(-1, 1), DType::F32, Device::cpu(),
                        Kind::Float);
}

// Restores the GPU's switch (process-wide) when the test ends.
class SwitchGuard {
 public:
  explicit SwitchGuard(Device device) : device_(device), was_(device.allow_tf32()) {}
  ~SwitchGuard() { device_.set_allow_tf32(was_); }

 private:
  Device device_;
  bool was_;
};

// The error of build(gpu) against build(cpu) in f64, with the switch off and on.
std::pair<double, double> errors_off_and_on(const Device& gpu,
                                            const std::function<Primitive(Device, DType)>& build) {
  const Primitive reference = build(Device::cpu(), DType::F64);
  gpu.set_allow_tf32(false);
  const double off = relative_error(detail::cast(build(gpu, DType::F32), DType::F64), reference);
  gpu.set_allow_tf32(true);
  const double on = relative_error(detail::cast(build(gpu, DType::F32), DType::F64), reference);
  gpu.set_allow_tf32(false);
  return {off, on};
}

}  // namespace

TEST(GpuTf32, OffByDefault) {
  KILN_REQUIRE_GPU();
  EXPECT_FALSE(Device::cuda(0).allow_tf32()) << "tf32 must be opt-in";
}

TEST(GpuTf32, MatmulErrorIsTf32SizedOnlyWhenAllowed) {
  KILN_REQUIRE_GPU();
  SwitchGuard guard(device);
  const Primitive a = uniform(Shape{512, 512}, 11);
  const Primitive b = uniform(Shape{512, 512}, 12);
  const auto [off, on] = errors_off_and_on(device, [&](Device d, DType dtype) {
    return detail::matmul(detail::to_device(detail::cast(a, dtype), d),
                          detail::to_device(detail::cast(b, dtype), d));
  });
  RecordProperty("f32_relative_error", std::to_string(off));
  RecordProperty("tf32_relative_error", std::to_string(on));
  EXPECT_LT(off, 1e-5) << "f32 matmul with tf32 off";
  EXPECT_GT(on, 5e-5) << "tf32 on: expected a tf32-sized error (is tf32 used?)";
  EXPECT_LT(on, 5e-3) << "tf32 on: error beyond tf32's rounding";
  EXPECT_GT(on, 20 * off);
}

// kiln's own path (cuDNN's: backend_conv_cudnn_test.cpp, where the error with tf32 allowed is
// whatever cuDNN's fastest algorithm gives).
TEST(GpuTf32, ConvErrorIsTf32SizedOnlyWhenAllowed) {
  KILN_REQUIRE_GPU();
  SwitchGuard guard(device);
  const test::ScopedEnv path("KILN_CONV", "kiln");
  const Primitive x = uniform(Shape{2, 16, 20, 20}, 13);
  const Primitive w = uniform(Shape{32, 16, 3, 3}, 14);
  const auto [off, on] = errors_off_and_on(device, [&](Device d, DType dtype) {
    return detail::conv(detail::to_device(detail::cast(x, dtype), d),
                        detail::to_device(detail::cast(w, dtype), d), std::nullopt,
                        ConvOptions{{1, 1}, {1, 1}, {1, 1}, 1}, 2);
  });
  EXPECT_LT(off, 1e-5) << "f32 conv with tf32 off";
  EXPECT_GT(on, 5e-5) << "tf32 on: expected a tf32-sized error (is tf32 used?)";
  EXPECT_LT(on, 5e-3) << "tf32 on: error beyond tf32's rounding";
}

TEST(GpuTf32, OtherDTypesIgnoreTheSwitch) {
  KILN_REQUIRE_GPU();
  SwitchGuard guard(device);
  const Primitive a = uniform(Shape{64, 96}, 15);
  const Primitive b = uniform(Shape{96, 48}, 16);
  for (DType dtype : {DType::F64, DType::BF16, DType::I32}) {
    auto product = [&] {
      return detail::into_data(detail::matmul(detail::to_device(detail::cast(a, dtype), device),
                                              detail::to_device(detail::cast(b, dtype), device)));
    };
    device.set_allow_tf32(false);
    const TensorData off = product();
    device.set_allow_tf32(true);
    const TensorData on = product();
    test::expect_exact(on, off, std::string(dtype_name(dtype)) + " with tf32 allowed");
  }
}
