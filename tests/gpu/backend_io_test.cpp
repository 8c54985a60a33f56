// Reads, writes, device moves, casts and deferred errors.
#include <cmath>

#include "gpu/gpu_test_support.h"
#include "kiln/detail/tensor_ops.h"

using namespace kiln;

TEST(GpuIo, RoundTripEveryDtype) {
  KILN_REQUIRE_GPU();
  for (DType dt :
       {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32, DType::I16,
        DType::I8, DType::U64, DType::U32, DType::U16, DType::U8, DType::Bool}) {
    TensorData data =
        TensorData::from_vec(std::vector<double>{0, 1, 2, 3, 4, 5}, {2, 3}).convert(dt);
    const Kind kind = is_float(dt) ? Kind::Float : (is_int(dt) ? Kind::Int : Kind::Bool);
    Primitive p = detail::from_data(data, device, kind, 2);
    const TensorData back = detail::into_data_async(p).get();
    EXPECT_EQ(back.dtype(), dt);
    EXPECT_EQ(back.shape(), data.shape());
    EXPECT_TRUE(std::equal(back.bytes().begin(), back.bytes().end(), data.bytes().begin()))
        << dtype_name(dt);
  }
}

TEST(GpuIo, AsyncReadAndOneSyncForMany) {
  KILN_REQUIRE_GPU();
  auto a = Tensor<2>::random({256, 256}, Distribution::normal(0, 1), device);
  auto future = (a * 2.0).into_data_async();  // queued; completes when the copy lands
  auto b = a.transpose() + 1.0;               // more work queued meanwhile
  const auto twice = future.get().to_vec<float>();
  const auto plain = a.into_data().to_vec<float>();
  for (std::size_t i = 0; i < plain.size(); ++i) ASSERT_EQ(twice[i], 2 * plain[i]);
  const auto both = detail::read_many({a.primitive(), b.primitive()});
  ASSERT_EQ(both.size(), 2u);
  const auto bt = both[1].to_vec<float>();
  EXPECT_EQ(bt[1], plain[256] + 1.0f);  // b[0][1] = a[1][0] + 1
}

TEST(GpuIo, MovesBetweenDevices) {
  KILN_REQUIRE_GPU();
  auto host = Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{1, 2, 3, 4}, {2, 2}),
                                   Device::cpu());
  auto gpu = host.to_device(device);
  EXPECT_EQ(gpu.device(), device);
  auto back = (gpu * 3.0).to_device(Device::cpu());
  EXPECT_EQ(back.device(), Device::cpu());
  EXPECT_EQ(back.into_data().to_vec<float>(), (std::vector<float>{3, 6, 9, 12}));
  if (Device::count(DeviceKind::Cuda) > 1) {
    auto other = gpu.transpose().to_device(Device::cuda(1));
    EXPECT_EQ(other.into_data().to_vec<float>(), (std::vector<float>{1, 3, 2, 4}));
  }
}

TEST(GpuIo, CastsRoundLikeTheCpu) {
  KILN_REQUIRE_GPU();
  std::vector<float> values = {0.1f,      1.0f / 3, 65504.0f, 65520.0f, -1e-8f, 1e30f,  NAN,
                               -INFINITY, 2.5f,     -2.5f,    3.9999f,  -7.7f,  300.0f, -300.0f};
  auto cpu = Tensor<1>::from_data(TensorData::from_vec(values), Device::cpu());
  auto gpu = cpu.to_device(device);
  for (DType dt : {DType::F16, DType::BF16, DType::F64, DType::I8, DType::U8, DType::I32,
                   DType::U64, DType::Bool}) {
    const TensorData expected = detail::into_data_async(detail::cast(cpu.primitive(), dt)).get();
    const TensorData got = detail::into_data_async(detail::cast(gpu.primitive(), dt)).get();
    EXPECT_TRUE(std::equal(got.bytes().begin(), got.bytes().end(), expected.bytes().begin()) ||
                dt == DType::F16 || dt == DType::BF16 || dt == DType::F64)
        << dtype_name(dt);
    const auto e = expected.to_f64_vec(), g = got.to_f64_vec();
    for (std::size_t i = 0; i < e.size(); ++i) {
      if (std::isnan(e[i]))
        EXPECT_TRUE(std::isnan(g[i])) << dtype_name(dt) << " " << i;
      else
        EXPECT_EQ(g[i], e[i]) << dtype_name(dt) << " element " << i;
    }
  }
}

TEST(GpuIo, FailedKernelSurfacesAtTheNextRead) {
  KILN_REQUIRE_GPU();
  auto x =
      Tensor<1, Int>::from_data(TensorData::from_vec(std::vector<std::int64_t>{1, 2, 3}), device);
  auto zero = Tensor<1, Int>::zeros({3}, device);
  auto bad = x / zero;  // queued; the kernel reports the division at the read
  try {
    (void)bad.into_data();
    FAIL() << "no error";
  } catch (const ExecutionError& e) {
    EXPECT_NE(std::string(e.what()).find("div"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("division by zero"), std::string::npos) << e.what();
  }
  // Reported once; the device keeps working.
  EXPECT_EQ((x + x).into_data().to_vec<std::int64_t>(), (std::vector<std::int64_t>{2, 4, 6}));
}
