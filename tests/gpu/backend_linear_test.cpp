// linear on cuda (src/backends/cuda/cuda_linear.cpp: one cuBLASLt call with a bias epilogue)
// against a float64 reference computed here and against the CPU backend: every float dtype, 1-D,
// 2-D and 3-D inputs, transposed views of x and of the weight, one row, no bias (the default's
// composition), an empty input, and gradients through autodiff.
#include <cstdint>
#include <vector>

#include "gpu/gpu_test_support.h"

using namespace kiln;

namespace gpu_linear_test {

Primitive random(const Shape& shape, DType dtype, std::uint64_t seed) {
  return test::host_random(shape, dtype, seed, -1, 1);
}

// y[r, j] = sum_i x[r, i] w[i, j] + b[j], in float64 from the (rounded) inputs.
std::vector<double> reference(const Primitive& x, const Primitive& w, const Primitive* b) {
  const std::vector<double> xs = detail::into_data(x).to_f64_vec();
  const std::vector<double> ws = detail::into_data(w).to_f64_vec();
  const std::vector<double> bs = b ? detail::into_data(*b).to_f64_vec() : std::vector<double>();
  const std::int64_t in = w->shape()[0], out = w->shape()[1];
  const std::int64_t rows = static_cast<std::int64_t>(xs.size()) / std::max<std::int64_t>(in, 1);
  std::vector<double> y(static_cast<std::size_t>(rows * out));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < out; ++j) {
      double sum = b ? bs[static_cast<std::size_t>(j)] : 0.0;
      for (std::int64_t i = 0; i < in; ++i) {
        sum += xs[static_cast<std::size_t>(r * in + i)] * ws[static_cast<std::size_t>(i * out + j)];
      }
      y[static_cast<std::size_t>(r * out + j)] = sum;
    }
  }
  return y;
}

double tolerance(DType dtype) {
  return dtype == DType::F64   ? 1e-12
         : dtype == DType::F32 ? 1e-5
         : dtype == DType::F16 ? 4e-3
                               : 3e-2;
}

void expect_near_all(const Primitive& got, const std::vector<double>& want, double tol,
                     const std::string& what) {
  const std::vector<double> g = detail::into_data(got).to_f64_vec();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i) {
    // Sums of up to 70 products of magnitude <= 1: the bound scales with the row length.
    ASSERT_NEAR(g[i], want[i], tol * 10 * (1 + std::abs(want[i]))) << what << " at " << i;
  }
}

}  // namespace gpu_linear_test

TEST(GpuLinear, MatchesFloat64AndTheCpuInEveryFloatDType) {
  KILN_REQUIRE_GPU();
  using namespace gpu_linear_test;
  for (DType dtype : test::kFloatDTypes) {
    for (const Shape& x_shape : {Shape{70}, Shape{1, 70}, Shape{33, 70}, Shape{2, 5, 70}}) {
      const std::string what = std::string(dtype_name(dtype)) + " x " + x_shape.to_string();
      const Primitive x = random(x_shape, dtype, 1), w = random(Shape{70, 45}, dtype, 2),
                      b = random(Shape{45}, dtype, 3);
      const Primitive got = detail::linear(
          detail::to_device(x, device), detail::to_device(w, device), detail::to_device(b, device));
      EXPECT_EQ(got->shape(), detail::linear(x, w, b)->shape()) << what;
      expect_near_all(got, reference(x, w, &b), tolerance(dtype), what);
      const Primitive no_bias =
          detail::linear(detail::to_device(x, device), detail::to_device(w, device), std::nullopt);
      expect_near_all(no_bias, reference(x, w, nullptr), tolerance(dtype), what + " no bias");
    }
  }
}

TEST(GpuLinear, TransposedViewsEmptyInputsAndGradients) {
  KILN_REQUIRE_GPU();
  using namespace gpu_linear_test;
  // x as the transpose of [70, 33]; the weight [45, 70] as stored ([out, in]).
  const Tensor<2> xt = Tensor<2>::wrap(random(Shape{70, 33}, DType::F32, 4));
  const Tensor<2> wt = Tensor<2>::wrap(random(Shape{45, 70}, DType::F32, 5));
  const Tensor<1> b = Tensor<1>::wrap(random(Shape{45}, DType::F32, 6));
  const Tensor<2> want = module::linear(xt.transpose(), wt, b);
  const Tensor<2> got =
      module::linear(xt.to_device(device).transpose(), wt.to_device(device), b.to_device(device));
  expect_near_all(got.primitive(), detail::into_data(want.primitive()).to_f64_vec(), 1e-5,
                  "transposed views");
  // A 3-D input whose leading dims do not walk as one (a permuted view): copied, same values.
  const Tensor<3> x3 = Tensor<3>::wrap(random(Shape{5, 2, 70}, DType::F32, 7));
  const Tensor<3> want3 = module::linear(x3.permute({1, 0, 2}), wt, b);
  const Tensor<3> got3 = module::linear(x3.to_device(device).permute({1, 0, 2}),
                                        wt.to_device(device), b.to_device(device));
  expect_near_all(got3.primitive(), detail::into_data(want3.primitive()).to_f64_vec(), 1e-5,
                  "permuted 3-D input");
  // No rows: an empty result of the right shape.
  const Tensor<2> empty = Tensor<2>::zeros({0, 70}, device);
  EXPECT_EQ(module::linear(empty, wt.to_device(device), b.to_device(device)).shape(),
            (Shape{0, 45}));
  // Gradients through autodiff on cuda equal the CPU's.
  const Device ad = device.autodiff();
  const Tensor<2> x = Tensor<2>::wrap(random(Shape{33, 70}, DType::F32, 8));
  const Tensor<2> w = Tensor<2>::wrap(random(Shape{70, 45}, DType::F32, 9));
  auto grads_on = [&](const Device& d) {
    const Tensor<2> xg = x.to_device(d).require_grad(), wg = w.to_device(d).require_grad();
    const Tensor<1> bg = b.to_device(d).require_grad();
    const Tensor<2> y = module::linear(xg, wg.transpose(), bg);
    const Gradients g = (y * y).sum().backward();
    return std::vector<std::vector<double>>{xg.grad(g)->into_data().to_f64_vec(),
                                            wg.grad(g)->into_data().to_f64_vec(),
                                            bg.grad(g)->into_data().to_f64_vec()};
  };
  const auto gpu = grads_on(ad), cpu = grads_on(Device::cpu().autodiff());
  for (std::size_t k = 0; k < 3; ++k) {
    ASSERT_EQ(gpu[k].size(), cpu[k].size());
    for (std::size_t i = 0; i < gpu[k].size(); ++i) {
      ASSERT_NEAR(gpu[k][i], cpu[k][i], 1e-4 * (1 + std::abs(cpu[k][i]))) << "grad " << k;
    }
  }
}
