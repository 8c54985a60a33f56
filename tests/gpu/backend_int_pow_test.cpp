// Integer powers on the GPU agree with the CPU (whose closed forms tests/backends/cpu/
// int_pow_test.cpp checks), and 0 raised to a negative power fails as an integer division by
// zero does on the GPU: a deferred ExecutionError at the next read, naming the op.
#include <cstdint>
#include <functional>
#include <limits>

#include "gpu/gpu_test_support.h"

using namespace kiln;

namespace {

std::vector<double> as_f64(const Tensor<1, Int>& t) { return t.into_data().to_f64_vec(); }

}  // namespace

TEST(GpuIntPow, ScalarAndTensorExponentsMatchTheCpu) {
  KILN_REQUIRE_GPU();
  const std::vector<double> bases = {-128, -7, -3, -2, -1, 1, 2, 3, 7, 10, 127};
  for (DType dt : {DType::I64, DType::I32, DType::I16, DType::I8, DType::U64, DType::U32,
                   DType::U16, DType::U8}) {
    std::vector<double> b = bases;
    if (is_unsigned_int(dt)) b = {1, 2, 3, 7, 10, 127, 255};
    const auto cpu = Tensor<1, Int>::from_data(TensorData::from_vec(b).convert(dt), Device::cpu());
    const auto gpu = cpu.to_device(device);
    for (Scalar e :
         {Scalar(0), Scalar(3), Scalar(257), Scalar(65537), Scalar(std::int64_t{1} << 40),
          Scalar(std::numeric_limits<std::uint64_t>::max()), Scalar(-1), Scalar(-2),
          Scalar(std::numeric_limits<std::int64_t>::min()), Scalar(-3.0), Scalar(4.0)}) {
      EXPECT_EQ(as_f64(gpu.pow_scalar(e)), as_f64(cpu.pow_scalar(e)))
          << dtype_name(dt) << " ^ " << e.to_double();
    }
    if (is_signed_int(dt)) {
      const auto exponents = Tensor<1, Int>::from_data(
          TensorData::from_vec(std::vector<double>{-3, -2, -1, 0, 1, 2, 3, -5, 4, 5, -1})
              .convert(dt),
          Device::cpu());
      EXPECT_EQ(as_f64(gpu.pow(exponents.to_device(device))), as_f64(cpu.pow(exponents)))
          << dtype_name(dt);
    }
  }
}

TEST(GpuIntPow, ZeroToANegativePowerFailsAtTheRead) {
  KILN_REQUIRE_GPU();
  const auto x =
      Tensor<1, Int>::from_data(TensorData::from_vec(std::vector<std::int32_t>{2, 0}), device);
  const auto minus_one =
      Tensor<1, Int>::from_data(TensorData::from_vec(std::vector<std::int32_t>{1, -1}), device);
  // One at a time: the device reports the failure of the work queued before a read.
  const std::function<Tensor<1, Int>()> failing[] = {[&] { return x.pow_scalar(-1); },
                                                     [&] { return x.pow(minus_one); }};
  for (const auto& make : failing) {
    try {
      (void)make().into_data();
      ADD_FAILURE() << "0 raised to -1 was not reported";
    } catch (const ExecutionError& e) {
      EXPECT_NE(std::string(e.what()).find("pow"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("0 raised to a negative power"), std::string::npos)
          << e.what();
    }
  }
  // The device keeps working, and positive powers of 0 are fine.
  EXPECT_EQ(x.pow_scalar(3).into_data().to_vec<std::int32_t>(), (std::vector<std::int32_t>{8, 0}));
}
