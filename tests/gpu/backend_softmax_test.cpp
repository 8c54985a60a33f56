// softmax and log_softmax on the GPU (softmax.h: rows kept in registers by a thread, a warp, a
// block of 256 or of 1024; long rows and strided lines in chunks with a combine pass) against
// the CPU backend on the same data: every float dtype, every dim, odd and long lengths,
// transposed and sliced views, NaN / +inf / -inf entries and rows of -inf; softmin and the
// gradients (autodiff's rules on top of the GPU's ops) too.
#include <cmath>
#include <string>
#include <vector>

#include "gpu/cpu_reference.h"
#include "gpu/gpu_test_support.h"

using namespace kiln;
using kiln::test::expect_close_to_cpu;
using kiln::test::host_values;

namespace {

const DType kFloats[] = {DType::F32, DType::F64, DType::F16, DType::BF16};

// exp in f32 (or f64) then one rounding to the dtype: a few ulp of the compute type.
double softmax_tolerance(DType dtype) {
  switch (dtype) {
    case DType::F64:
      return 1e-12;
    case DType::F32:
      return 2e-6;
    case DType::F16:
      return 2e-3;
    default:
      return 1.6e-2;
  }
}

enum class SoftmaxLayout { Contiguous, Transposed, Sliced };

struct SoftmaxCase {
  Shape shape;  // of the tensor after the layout's view
  std::int64_t dim;
  SoftmaxLayout layout;
  const char* path;
};

const SoftmaxCase kSoftmaxCases[] = {
    {Shape{4, 1}, 1, SoftmaxLayout::Contiguous, "rows of one"},
    {Shape{6, 10}, 1, SoftmaxLayout::Contiguous, "a thread per short row"},
    {Shape{3, 33}, 1, SoftmaxLayout::Contiguous, "a warp per row, scalar"},
    {Shape{3, 1000}, 1, SoftmaxLayout::Contiguous, "a warp per row, vector"},
    {Shape{2, 4097}, 1, SoftmaxLayout::Contiguous, "a block of 256 per row"},
    {Shape{2, 9000}, 1, SoftmaxLayout::Contiguous, "a block of 1024 per row"},
    {Shape{3, 40000}, 1, SoftmaxLayout::Contiguous, "long rows in chunks"},
    {Shape{1, 100000}, 1, SoftmaxLayout::Contiguous, "one long row in many chunks"},
    {Shape{64, 1000}, 0, SoftmaxLayout::Contiguous, "strided lines in chunks"},
    {Shape{20, 7}, 0, SoftmaxLayout::Contiguous, "short strided lines in registers"},
    {Shape{4, 5, 6}, 0, SoftmaxLayout::Contiguous, "3-d, dim 0"},
    {Shape{4, 5, 6}, 1, SoftmaxLayout::Contiguous, "3-d, dim 1"},
    {Shape{4, 5, 6}, 2, SoftmaxLayout::Contiguous, "3-d, dim 2"},
    {Shape{300, 50}, 1, SoftmaxLayout::Transposed, "transposed, along the strided dim"},
    {Shape{300, 50}, 0, SoftmaxLayout::Transposed, "transposed, along the contiguous dim"},
    {Shape{3, 1001}, 1, SoftmaxLayout::Sliced, "rows starting off 16-byte boundaries"},
};

Primitive view(const Primitive& stored, SoftmaxLayout layout) {
  switch (layout) {
    case SoftmaxLayout::Contiguous:
      return stored;
    case SoftmaxLayout::Transposed:
      return detail::transpose(stored);
    case SoftmaxLayout::Sliced:
      return detail::narrow(stored, 1, 1, stored->shape()[1] - 2);
  }
  return stored;
}

Shape stored_shape(const SoftmaxCase& c) {
  if (c.layout == SoftmaxLayout::Transposed) return Shape{c.shape[1], c.shape[0]};
  if (c.layout == SoftmaxLayout::Sliced) return Shape{c.shape[0], c.shape[1] + 2};
  return c.shape;
}

// Logits in [-8, 8]; in the stored row-major order: a NaN, a +inf and some -inf in the first
// lines, and (for contiguous rows along the last dim) a second row of -inf only.
Primitive logits(const SoftmaxCase& c, DType dtype, std::uint64_t seed) {
  const Shape shape = stored_shape(c);
  std::vector<std::pair<std::int64_t, double>> specials;
  if (shape.num_elements() >= 64)
    specials = {{3, NAN}, {40, INFINITY}, {0, -INFINITY}, {50, -INFINITY}};
  if (c.layout == SoftmaxLayout::Contiguous &&
      c.dim + 1 == static_cast<std::int64_t>(shape.rank()) && shape[0] > 2) {
    const std::int64_t n = shape[shape.rank() - 1];
    for (std::int64_t k = 0; k < n; ++k) specials.push_back({n + k, -INFINITY});
  }
  return host_values(shape, dtype, seed, -8, 8, specials);
}

}  // namespace

TEST(GpuSoftmax, EveryDtypeDimAndPathMatchesTheCpu) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 1;
  for (DType dtype : kFloats) {
    for (const SoftmaxCase& c : kSoftmaxCases) {
      const Primitive stored = logits(c, dtype, seed++);
      for (bool log : {false, true}) {
        auto op = [&](const Primitive& x) {
          return log ? detail::log_softmax(x, c.dim) : detail::softmax(x, c.dim);
        };
        const std::string what = std::string(log ? "log_softmax " : "softmax ") +
                                 std::string(dtype_name(dtype)) + " " + c.shape.to_string() +
                                 " dim " + std::to_string(c.dim) + " (" + c.path + ")";
        const TensorData got =
            detail::into_data(op(view(detail::to_device(stored, device), c.layout)));
        const TensorData want = detail::into_data(op(view(stored, c.layout)));
        expect_close_to_cpu(got, want, softmax_tolerance(dtype), what);
      }
    }
  }
}

TEST(GpuSoftmax, EmptyAndLargeLogitsMatchTheCpu) {
  KILN_REQUIRE_GPU();
  const Primitive empty = host_values(Shape{0, 5}, DType::F32, 2, 0, 1);
  EXPECT_EQ(detail::softmax(detail::to_device(empty, device), 1)->shape(), (Shape{0, 5}));
  const Primitive big = detail::from_data(
      TensorData::from_vec(std::vector<double>{1000, 999, -1000, 0, 5000, 4999, -5000, -4000},
                           Shape{2, 4}),
      Device::cpu(), Kind::Float, 2);
  for (bool log : {false, true}) {
    auto op = [&](const Primitive& x) {
      return log ? detail::log_softmax(x, 1) : detail::softmax(x, 1);
    };
    expect_close_to_cpu(detail::into_data(op(detail::to_device(big, device))),
                        detail::into_data(op(big)), 1e-12,
                        log ? "log_softmax of large logits" : "softmax of large logits");
  }
}

// Issue 5's benchmark shape through the public API.
TEST(GpuSoftmax, Square8192MatchesTheCpu) {
  KILN_REQUIRE_GPU();
  device.seed(21);
  auto gpu = Tensor<2>::random({8192, 8192}, Distribution::normal(0, 3), device);
  auto cpu = gpu.to_device(Device::cpu());
  expect_close_to_cpu(activation::softmax(gpu, 1).into_data(),
                      activation::softmax(cpu, 1).into_data(), 2e-6, "softmax dim 1");
  expect_close_to_cpu(activation::log_softmax(gpu, 1).into_data(),
                      activation::log_softmax(cpu, 1).into_data(), 2e-6, "log_softmax dim 1");
  expect_close_to_cpu(activation::softmax(gpu, 0).into_data(),
                      activation::softmax(cpu, 0).into_data(), 2e-6, "softmax dim 0");
  auto half = gpu.cast(DType::BF16);
  expect_close_to_cpu(activation::softmax(half, 1).into_data(),
                      activation::softmax(half.to_device(Device::cpu()), 1).into_data(), 1.6e-2,
                      "bf16 softmax dim 1");
}

// softmin is the default (softmax of -x); the gradients are autodiff's rules (sum_dim, mul,
// sub) on the GPU's ops.
TEST(GpuSoftmax, SoftminAndGradientsMatchTheCpu) {
  KILN_REQUIRE_GPU();
  const Primitive x = host_values(Shape{16, 3000}, DType::F32, 5, -4, 4);
  const Primitive w = host_values(Shape{16, 3000}, DType::F32, 6, -1, 1);
  expect_close_to_cpu(detail::into_data(detail::softmin(detail::to_device(x, device), 1)),
                      detail::into_data(detail::softmin(x, 1)), 2e-6, "softmin");
  auto gradient = [&](Device d, bool log) {
    auto input = Tensor<2>::from_data(detail::into_data(x), d.autodiff()).require_grad();
    auto weights = Tensor<2>::from_data(detail::into_data(w), d.autodiff());
    auto y = log ? activation::log_softmax(input, 1) : activation::softmax(input, 1);
    Gradients grads = (y * weights).sum().backward();
    return input.grad(grads)->into_data();
  };
  for (bool log : {false, true}) {
    expect_close_to_cpu(gradient(device, log), gradient(Device::cpu(), log), 1e-5,
                        log ? "log_softmax gradient" : "softmax gradient");
  }
}
