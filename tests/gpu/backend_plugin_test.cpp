// Loading the plugin: what touching a GPU maps into the process, the backend's name, its
// dtype usage and typed errors for devices that do not exist.
#include "gpu/gpu_test_support.h"
#include "support/process_maps.h"

using namespace kiln;

TEST(GpuPluginChild, TouchCuda) {
  if (std::getenv("KILN_MAPS_PROBE") == nullptr) GTEST_SKIP() << "runs only as a child process";
  KILN_REQUIRE_GPU();
  auto a = Tensor<1>::ones({16}, device);
  EXPECT_EQ((a + a).into_data().to_vec<float>(), std::vector<float>(16, 2.0f));
  EXPECT_TRUE(test::mapped("libkiln_cuda.so"));
  EXPECT_TRUE(test::mapped("libcuda.so"));
}

TEST(GpuPlugin, TouchingCudaMapsPluginAndDriver) {
  KILN_REQUIRE_GPU();
  EXPECT_EQ(test::run_self("GpuPluginChild.TouchCuda", "KILN_MAPS_PROBE=1"), 0);
}

TEST(GpuPlugin, NameUsageAndErrors) {
  KILN_REQUIRE_GPU();
  const std::string name = device.backend_name();
  EXPECT_EQ(name.rfind("cuda<sm_", 0), 0u) << name;
  EXPECT_EQ(device.autodiff().backend_name(), "autodiff<" + name + ">");
  for (DType dt :
       {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32, DType::I16,
        DType::I8, DType::U64, DType::U32, DType::U16, DType::U8, DType::Bool}) {
    EXPECT_TRUE(device.supports_dtype(dt)) << dtype_name(dt);
  }
  EXPECT_TRUE(device.dtype_usage(DType::BF16).contains(DTypeUsage::Accelerated));
  EXPECT_TRUE(device.dtype_usage(DType::F16).contains(DTypeUsage::Accelerated));
  EXPECT_FALSE(device.dtype_usage(DType::I64).contains(DTypeUsage::Accelerated));
  const int count = Device::count(DeviceKind::Cuda);
  EXPECT_GE(count, 1);
  EXPECT_THROW((void)Device::cuda(count), BackendUnavailable);
  EXPECT_EQ(Device::parse("cuda:0"), device);
}
