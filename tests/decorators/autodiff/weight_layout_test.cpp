// The layout of a linear layer's weight gradient: module::linear multiplies by the transpose of
// a weight stored [out, in] (PyTorch's layout), and its gradient reaches the weight row-major
// [out, in], as the weight lies, in f32 and through an autocast scope's bf16 cast (a transposed
// view there made every later pass over it, the cast back to f32 and the optimizer's update,
// read with a stride). The values are checked against float64 loops in each case.
#include <kiln/autocast.h>

#include <vector>

#include "backends/cpu/cpu_tensor.h"
#include "decorators/autodiff/autodiff_tensor.h"
#include "decorators/autodiff/test_support.h"

namespace kiln::autodiff_test {
namespace weight_layout {

constexpr std::int64_t kRows = 15, kIn = 4, kOut = 6;

// dW[o][i] = Σ_r c[r][o] x[r][i] for loss = Σ (x Wᵀ + b) ⊙ c.
std::vector<double> weight_grad_reference(const std::vector<double>& x,
                                          const std::vector<double>& c) {
  std::vector<double> dw(kOut * kIn, 0.0);
  for (std::int64_t r = 0; r < kRows; ++r) {
    for (std::int64_t o = 0; o < kOut; ++o) {
      for (std::int64_t i = 0; i < kIn; ++i) dw[o * kIn + i] += c[r * kOut + o] * x[r * kIn + i];
    }
  }
  return dw;
}

struct Case {
  std::vector<double> x = spread(kRows * kIn, -1, 1, 31);
  std::vector<double> c = spread(kRows * kOut, -1, 1, 32);
  Tensor<2> weight = tensor<2>(spread(kOut * kIn, -0.5, 0.5, 33), {kOut, kIn}).require_grad();
  Tensor<1> bias = tensor<1>(spread(kOut, -0.1, 0.1, 34), {kOut}).require_grad();

  // The gradient of the weight, after a loss over x [5, 3, in] (rows flattened by linear).
  Tensor<2> weight_grad() const {
    const auto input = tensor<3>(x, {5, 3, kIn});
    const auto weights = tensor<3>(c, {5, 3, kOut});
    const Tensor<3> y = module::linear(input, weight, bias);
    return grad_of(weight, (y.cast(DType::F32) * weights).sum().backward());
  }
};

// The CPU tensor under the autodiff wrapper of a gradient on kAd.
const cpu::CpuTensor& cpu_tensor(const Tensor<2>& t) {
  const Primitive& p = t.primitive();
  return cpu::as_cpu(
      autodiff::is_autodiff(p) ? static_cast<const autodiff::AutodiffTensor&>(*p).inner() : p);
}

void expect_row_major(const Tensor<2>& grad, const char* what) {
  const cpu::CpuTensor& t = cpu_tensor(grad);
  EXPECT_TRUE(t.is_contiguous()) << what << ": strides " << t.strides()[0] << ", "
                                 << t.strides()[1];
  EXPECT_EQ(grad.dims(), (std::array<std::int64_t, 2>{kOut, kIn})) << what;
}

TEST(AutodiffWeightLayout, ModuleLinearGivesARowMajorWeightGradient) {
  const Case c;
  const Tensor<2> grad = c.weight_grad();
  expect_row_major(grad, "f32");
  expect_close(values(grad), weight_grad_reference(c.x, c.c), 1e-5, "f32 weight gradient");
}

// On the CPU a cast writes a row-major result whatever its operand's layout (on cuda the cast of
// a transposed gradient read it with a stride): here the dtype, layout and values are checked.
TEST(AutodiffWeightLayout, ThroughAnAutocastScopeTheCastWeightsGradientIsRowMajorToo) {
  const Case c;
  Tensor<2> grad = c.weight;
  {
    AutocastScope amp(kAd, DType::BF16);
    grad = c.weight_grad();
  }
  EXPECT_EQ(grad.dtype(), DType::F32);
  expect_row_major(grad, "bf16 autocast");
  // bf16 operands (8 significant bits) and a bf16 product: a loose bound.
  expect_close(values(grad), weight_grad_reference(c.x, c.c), 5e-2, "bf16 weight gradient");
}

// A weight passed as [in, out] to the transposed form (a square-free check that the other
// layout keeps its own row-major gradient).
TEST(AutodiffWeightLayout, AWeightStoredInOutKeepsItsOwnLayout) {
  const Case c;
  const auto stored_in_out =
      tensor<2>(spread(kOut * kIn, -0.5, 0.5, 35), {kIn, kOut}).require_grad();
  const auto input = tensor<3>(c.x, {5, 3, kIn});
  const auto weights = tensor<3>(c.c, {5, 3, kOut});
  const Tensor<3> y = module::linear(input, stored_in_out.transpose(), c.bias);
  const Tensor<2> grad = grad_of(stored_in_out, (y * weights).sum().backward());
  const cpu::CpuTensor& t = cpu_tensor(grad);
  EXPECT_TRUE(t.is_contiguous()) << "strides " << t.strides()[0] << ", " << t.strides()[1];
  const std::vector<double> dw = weight_grad_reference(c.x, c.c);
  std::vector<double> want(kIn * kOut);
  for (std::int64_t o = 0; o < kOut; ++o) {
    for (std::int64_t i = 0; i < kIn; ++i) want[i * kOut + o] = dw[o * kIn + i];
  }
  expect_close(values(grad), want, 1e-5, "[in, out] weight gradient");
}

}  // namespace weight_layout
}  // namespace kiln::autodiff_test
