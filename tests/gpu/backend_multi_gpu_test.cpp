// to_device between two GPUs (a peer copy ordered against both devices' streams by events):
// cuda:0 -> cuda:1 -> cuda:0 round trips of every dtype, of views that are not contiguous, of
// broadcast and zero-size tensors, with the source dropped right after the move; then ops on
// cuda:1 against the CPU. Needs two GPUs: with fewer every test skips, saying how many there are.
#include <string>
#include <vector>

#include "gpu/gpu_exact.h"
#include "gpu/gpu_test_support.h"

using namespace kiln;
using test::Fill;

namespace {

// How many GPUs there are, and why not more (for the skip message).
int gpu_count(std::string& reason) {
  const int count = cuda_device_count(&reason);
  if (count == 1) reason = "only cuda:0 is present";
  return count;
}

// The views taken on the source GPU before moving: name and how.
struct SourceView {
  const char* name;
  std::function<Primitive(Primitive)> take;
};

const SourceView kViews[] = {
    {"contiguous", [](Primitive p) { return p; }},
    {"permuted",
     [](Primitive p) {
       return detail::permute(std::move(p), {1, 0});
     }},
    {"sliced",
     [](Primitive p) {
       return detail::slice(std::move(p), {Slice{1, 30, 3}, Slice{2, 50, 2}});
     }},
    {"flipped",
     [](Primitive p) {
       return detail::flip(std::move(p), {0, 1});
     }},
    {"row broadcast",
     [](Primitive p) {
       return detail::expand(detail::slice(std::move(p), {Slice{0, 1}}), Shape{37, 53});
     }},
};

}  // namespace

// Declares gpu0 and gpu1, or skips naming how many GPUs there are.
#define KILN_REQUIRE_TWO_GPUS()                                                             \
  std::string kiln_reason;                                                                  \
  const int kiln_count = gpu_count(kiln_reason);                                            \
  if (kiln_count < 2)                                                                       \
    GTEST_SKIP() << "no CUDA device cuda:1 (this test needs two GPUs, found " << kiln_count \
                 << "): " << kiln_reason;                                                   \
  const Device gpu0 = Device::cuda(0);                                                      \
  const Device gpu1 = Device::cuda(1)

TEST(GpuMultiDevice, RoundTripsEveryDTypeAndView) {
  KILN_REQUIRE_TWO_GPUS();
  std::uint64_t seed = 1100;
  for (DType dtype : test::kEveryDType) {
    const TensorData data = test::random_data(Shape{37, 53}, dtype, seed++, Fill::Wide);
    for (const SourceView& view : kViews) {
      const std::string what = std::string(dtype_name(dtype)) + " " + view.name;
      const TensorData want = detail::into_data(view.take(test::on_cpu(data)));
      Primitive there =
          detail::to_device(view.take(detail::to_device(test::on_cpu(data), gpu0)), gpu1);
      EXPECT_EQ(there->device(), gpu1) << what;
      const Primitive back = detail::to_device(there, gpu0);
      EXPECT_EQ(back->device(), gpu0) << what;
      test::expect_exact(detail::into_data(there), want, what + " on cuda:1");
      there.reset();  // the copy back must not depend on the cuda:1 tensor living on
      test::expect_exact(detail::into_data(back), want, what + " back on cuda:0");
    }
  }
}

TEST(GpuMultiDevice, ZeroSizeAndScalarTensors) {
  KILN_REQUIRE_TWO_GPUS();
  for (const Shape& shape : {Shape{0}, Shape{4, 0, 3}, Shape{}}) {
    const TensorData data = test::random_data(shape, DType::F32, 1200, Fill::Wide);
    const Primitive there = detail::to_device(detail::to_device(test::on_cpu(data), gpu0), gpu1);
    const Primitive back = detail::to_device(there, gpu0);
    test::expect_exact(detail::into_data(there), data, shape.to_string() + " on cuda:1");
    test::expect_exact(detail::into_data(back), data, shape.to_string() + " back on cuda:0");
  }
}

TEST(GpuMultiDevice, SourceReusedRightAfterTheMove) {
  KILN_REQUIRE_TWO_GPUS();
  // The source's block goes back to cuda:0's cache as soon as it is dropped, and new work on
  // cuda:0 reuses it: the peer copy must have read it first.
  const TensorData data = test::random_data(Shape{1 << 20}, DType::I32, 1300, Fill::Wide);
  Primitive source = detail::to_device(test::on_cpu(data), gpu0);
  const Primitive there = detail::to_device(source, gpu1);
  source.reset();
  for (int i = 0; i < 4; ++i) {
    (void)detail::full(Shape{1 << 20}, -1, DType::I32, gpu0, Kind::Int);
  }
  test::expect_exact(detail::into_data(there), data, "moved before the source was reused");
}

TEST(GpuMultiDevice, OpsRunOnTheSecondGpu) {
  KILN_REQUIRE_TWO_GPUS();
  const TensorData a = test::random_data(Shape{64, 96}, DType::F32, 1400, Fill::Wide);
  const TensorData b = test::random_data(Shape{96, 48}, DType::F32, 1401, Fill::Wide);
  const TensorData mask = test::random_data(Shape{64, 96}, DType::Bool, 1402, Fill::Wide);
  auto on = [](const TensorData& data, const Device& d) {
    return detail::to_device(test::on_cpu(data), d);
  };
  auto near = [](const Primitive& got, const Primitive& want, double tolerance,
                 const std::string& what) {
    const auto g = detail::into_data(got).to_f64_vec(), w = detail::into_data(want).to_f64_vec();
    ASSERT_EQ(g.size(), w.size()) << what;
    for (std::size_t i = 0; i < g.size(); ++i) {
      ASSERT_NEAR(g[i], w[i], tolerance * (1 + std::fabs(w[i]))) << what << " element " << i;
    }
  };
  for (const Device& d : {gpu1, gpu0}) {
    const std::string where = d.to_string();
    const Primitive x = on(a, d), y = on(b, d), m = on(mask, d);
    EXPECT_EQ(detail::matmul(x, y)->device(), d);
    {
      // Bounded by the sum of |a||b| of each element (the wide fill cancels), not by the result.
      const Primitive ca = on(a, Device::cpu()), cb = on(b, Device::cpu());
      const auto g = detail::into_data(detail::matmul(x, y)).to_f64_vec();
      const auto w = detail::into_data(detail::matmul(ca, cb)).to_f64_vec();
      const auto scale =
          detail::into_data(detail::matmul(detail::abs(ca), detail::abs(cb))).to_f64_vec();
      ASSERT_EQ(g.size(), w.size());
      for (std::size_t i = 0; i < g.size(); ++i) {
        ASSERT_NEAR(g[i], w[i], 1e-5 * (1 + scale[i])) << "matmul on " << where << " element " << i;
      }
    }
    near(detail::add_scalar(x, 1.5), detail::add_scalar(on(a, Device::cpu()), 1.5), 0,
         "add on " + where);
    near(detail::sum_dim(x, 1), detail::sum_dim(on(a, Device::cpu()), 1), 1e-5, "sum on " + where);
    test::expect_exact(
        detail::into_data(detail::topk_with_indices(x, 5, 1, true).second),
        detail::into_data(detail::topk_with_indices(on(a, Device::cpu()), 5, 1, true).second),
        "topk on " + where);
    test::expect_exact(
        detail::into_data(detail::mask_select(x, m)),
        detail::into_data(detail::mask_select(on(a, Device::cpu()), on(mask, Device::cpu()))),
        "mask_select on " + where);
  }
  // An op mixing devices is refused, naming both.
  EXPECT_THROW((void)detail::add(on(a, gpu0), on(a, gpu1)), Error);
}
