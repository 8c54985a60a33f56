// The tf32 switch of a device (Device::set_allow_tf32): off by default, changeable at any time,
// shared by a device and its autodiff view. The CPU stores it and computes f32 products in f32
// whatever it says. The GPU side (tf32-sized errors when on) is tests/gpu/backend_tf32_test.cpp.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include "kiln/detail/tensor_ops.h"

namespace kiln {
namespace {

// Restores the cpu's switch after each test (it is process-wide).
class CpuTf32 : public ::testing::Test {
 protected:
  void SetUp() override { was_ = Device::cpu().allow_tf32(); }
  void TearDown() override { Device::cpu().set_allow_tf32(was_); }

 private:
  bool was_ = false;
};

TEST_F(CpuTf32, OffByDefaultAndRoundTrips) {
  const Device cpu = Device::cpu();
  cpu.set_allow_tf32(false);
  EXPECT_FALSE(cpu.allow_tf32());
  cpu.set_allow_tf32(true);
  EXPECT_TRUE(cpu.allow_tf32());
  cpu.set_allow_tf32(true);  // idempotent
  EXPECT_TRUE(cpu.allow_tf32());
  cpu.set_allow_tf32(false);
  EXPECT_FALSE(cpu.allow_tf32());
}

TEST_F(CpuTf32, SharedWithTheAutodiffView) {
  const Device cpu = Device::cpu();
  cpu.set_allow_tf32(false);
  cpu.autodiff().set_allow_tf32(true);
  EXPECT_TRUE(cpu.allow_tf32());
  EXPECT_TRUE(cpu.autodiff().allow_tf32());
  cpu.set_allow_tf32(false);
  EXPECT_FALSE(cpu.autodiff().allow_tf32());
}

TEST_F(CpuTf32, ChangeableAfterUseAndIndependentOfTheDefaultDTypes) {
  const Device cpu = Device::cpu();
  const DeviceSettings before = cpu.settings();  // fixes the settings (first use)
  cpu.set_allow_tf32(true);
  EXPECT_TRUE(cpu.allow_tf32());
  EXPECT_EQ(cpu.settings(), before);
}

TEST_F(CpuTf32, CpuProductsStayF32) {
  const Device cpu = Device::cpu();
  cpu.seed(7);
  const Shape shape{64, 64};
  const Primitive a =
      detail::random(shape, Distribution::uniform(-1, 1), DType::F32, cpu, Kind::Float);
  const Primitive b =
      detail::random(shape, Distribution::uniform(-1, 1), DType::F32, cpu, Kind::Float);
  cpu.set_allow_tf32(false);
  const std::vector<float> plain = detail::into_data(detail::matmul(a, b)).to_vec<float>();
  cpu.set_allow_tf32(true);
  const std::vector<float> allowed = detail::into_data(detail::matmul(a, b)).to_vec<float>();
  EXPECT_EQ(plain, allowed);
}

}  // namespace
}  // namespace kiln
