// The wide-load elementwise kernel walks its vectors forward and backward on alternate launches
// (src/backends/cuda/elementwise.cpp, next_direction): both directions give every element,
// the tail past the last whole vector included, and ops that read the element's index (arange,
// random) see the same index either way.
#include <vector>

#include "gpu/gpu_test_support.h"

using namespace kiln;

namespace {

std::vector<double> values(const Primitive& p) { return detail::into_data(p).to_f64_vec(); }

}  // namespace

TEST(GpuElementwise, BothDirectionsMatchTheCpu) {
  KILN_REQUIRE_GPU();
  // Sizes around whole vectors (4 f32, 8 f16) and one past the 2^20 mark; 0 launches nothing.
  for (const std::int64_t n : {std::int64_t{0}, std::int64_t{3}, std::int64_t{8},
                               std::int64_t{4099}, (std::int64_t{1} << 20) + 5}) {
    for (const DType dtype : {DType::F32, DType::F16, DType::F64, DType::I32, DType::U8}) {
      const Primitive a = test::host_random(Shape{n}, dtype, 3, -50, 50, !is_float(dtype));
      const Primitive b = test::host_random(Shape{n}, dtype, 4, -50, 50, !is_float(dtype));
      const auto want = values(detail::add(a, b));
      const Primitive ga = detail::to_device(a, device);
      const Primitive gb = detail::to_device(b, device);
      // Consecutive launches: one runs forward, the next backward, whichever comes first.
      for (int launch = 0; launch < 3; ++launch) {
        const auto got = values(detail::add(ga, gb));
        ASSERT_EQ(got.size(), want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], std::abs(want[i]) * test::tolerance_of(dtype))
              << dtype_name(dtype) << " n " << n << " launch " << launch << " at " << i;
        }
      }
    }
  }
}

TEST(GpuElementwise, IndexedOpsIgnoreTheDirection) {
  KILN_REQUIRE_GPU();
  // Each launch differs from the one before (start, seed), so an element a direction skipped
  // cannot pass by holding the previous launch's value in a reused block.
  const std::int64_t n = (std::int64_t{1} << 18) + 3;
  for (std::int64_t launch = 0; launch < 4; ++launch) {
    const std::int64_t start = 5 + launch;
    const auto got =
        Tensor<1, Int>::arange(start, start + 3 * n, device, 3).into_data().to_f64_vec();
    ASSERT_EQ(static_cast<std::int64_t>(got.size()), n);
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[static_cast<std::size_t>(i)], static_cast<double>(start + 3 * i)) << launch;
    }
  }
  for (std::uint64_t launch = 0; launch < 4; ++launch) {
    device.seed(9 + launch);
    const auto gpu = Tensor<1>::random({n}, Distribution::normal(1, 3), device, DType::F64)
                         .into_data()
                         .to_f64_vec();
    Device::cpu().seed(9 + launch);
    const auto cpu = Tensor<1>::random({n}, Distribution::normal(1, 3), Device::cpu(), DType::F64)
                         .into_data()
                         .to_f64_vec();
    ASSERT_EQ(gpu.size(), cpu.size());
    for (std::size_t i = 0; i < cpu.size(); ++i)
      ASSERT_NEAR(gpu[i], cpu[i], 1e-12) << launch << " at " << i;
  }
}
