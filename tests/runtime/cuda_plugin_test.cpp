// The CUDA plugin as seen from a program built with kiln, on any machine: typed errors when
// there is no usable GPU, and a CPU-only program maps no CUDA library at all.
#include "runtime/cuda_plugin.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include "support/process_maps.h"

using namespace kiln;

// Runs only as the child of CudaPlugin.CpuOnlyProgramMapsNoCudaLibrary (a fresh process).
TEST(CudaPluginChild, CpuOnlyWork) {
  if (std::getenv("KILN_MAPS_PROBE") == nullptr) GTEST_SKIP() << "runs only as a child process";
  auto a = Tensor<2>::ones({8, 8}, Device::cpu());
  EXPECT_EQ((a + a).sum().into_data().to_vec<float>(), std::vector<float>{128.0f});
  EXPECT_FALSE(test::mapped("libkiln_cuda")) << "the plugin was loaded without a CUDA device";
  EXPECT_FALSE(test::mapped("libcuda.so")) << "the driver was loaded without a CUDA device";
  EXPECT_FALSE(test::mapped("libcudart")) << "the CUDA runtime was loaded without a CUDA device";
}

TEST(CudaPlugin, CpuOnlyProgramMapsNoCudaLibrary) {
  EXPECT_EQ(test::run_self("CudaPluginChild.CpuOnlyWork", "KILN_MAPS_PROBE=1"), 0);
}

TEST(CudaPlugin, UnusableDevicesGiveTypedErrors) {
  std::string reason;
  bool not_compiled = false;
  const int count = cuda_device_count(&reason, &not_compiled);
  EXPECT_EQ(Device::count(DeviceKind::Cuda), count);
  try {
    (void)Device::cuda(count);  // one past the last GPU (the first when there is none)
    FAIL() << "Device::cuda(" << count << ") did not throw";
  } catch (const NotCompiled& e) {
    EXPECT_TRUE(not_compiled) << e.what();
  } catch (const BackendUnavailable& e) {
    EXPECT_FALSE(not_compiled);
    EXPECT_NE(std::string(e.what()).find("cuda:" + std::to_string(count)), std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)Device::cuda(-1), InvalidArgument);
  if (count == 0 && std::getenv("KILN_DEVICE") == nullptr) {
    EXPECT_FALSE(reason.empty());
    EXPECT_EQ(Device::default_device().kind(), DeviceKind::Cpu);
  }
}
