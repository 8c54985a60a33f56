// The gradient of softmax_cross_entropy with respect to its logits, (softmax(x) - onehot(t)) g,
// on both of the rule's paths: small logits compare the one-hot in the elementwise pass, large
// ones (at least 2^20 elements) scatter each row's target value over it afterwards. Against
// float64 loops, in f32 and bf16, with and without fusion, and the two paths bit for bit on the
// same rows.
#include <cmath>
#include <vector>

#include "decorators/autodiff/test_support.h"

namespace kiln::autodiff_test {
namespace cross_entropy_grad {

// 64 x 16411 = 1,050,304 elements: the scatter path.
constexpr std::int64_t kRows = 64, kClasses = 16411;

struct Problem {
  std::int64_t rows;
  std::vector<double> logits;
  std::vector<std::int64_t> targets;
};

Problem problem(std::int64_t rows) {
  Problem p{rows, spread(static_cast<std::size_t>(kRows * kClasses), -6, 6, 41), {}};
  p.logits.resize(static_cast<std::size_t>(rows * kClasses));
  const std::vector<double> picks = spread(static_cast<std::size_t>(kRows), 0, kClasses, 42);
  for (std::int64_t r = 0; r < rows; ++r)
    p.targets.push_back(static_cast<std::int64_t>(picks[static_cast<std::size_t>(r)]));
  // Row 0's target is its first column, row 1's its last.
  p.targets[0] = 0;
  if (rows > 1) p.targets[1] = kClasses - 1;
  return p;
}

// The gradient of the sum of the rows' losses over logits as stored (rounded to dtype).
std::vector<double> grad_of_sum(const Problem& p, Device device, DType dtype) {
  const Tensor<2> logits = tensor<2>(p.logits, {p.rows, kClasses}, device, dtype).require_grad();
  const auto targets =
      Tensor<1, Int>::from_data(TensorData::from_vec(p.targets, Shape{p.rows}), device);
  const auto losses = Tensor<1>::from_primitive(
      detail::softmax_cross_entropy(logits.primitive(), targets.primitive()));
  return values(grad_of(logits, losses.sum().backward()));
}

std::vector<double> reference(const Problem& p, DType dtype) {
  const std::vector<double> stored =
      TensorData::from_vec(p.logits, Shape{p.rows, kClasses}).convert(dtype).to_f64_vec();
  std::vector<double> grad(stored.size());
  for (std::int64_t r = 0; r < p.rows; ++r) {
    const double* x = stored.data() + r * kClasses;
    double max = x[0], sum = 0;
    for (std::int64_t c = 0; c < kClasses; ++c) max = std::max(max, x[c]);
    for (std::int64_t c = 0; c < kClasses; ++c) sum += std::exp(x[c] - max);
    for (std::int64_t c = 0; c < kClasses; ++c) {
      grad[static_cast<std::size_t>(r * kClasses + c)] =
          std::exp(x[c] - max) / sum - (c == p.targets[static_cast<std::size_t>(r)] ? 1.0 : 0.0);
    }
  }
  return grad;
}

class CrossEntropyGrad : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(CrossEntropyGrad, BothPathsMatchFloat64AndEachOther) {
  const auto [dtype, fused] = GetParam();
  const Device device = fused ? Device::cpu().fused().autodiff() : kAd;
  // f32: exp's rounding against probabilities of about 1 / 16411; bf16: the gradient's rounding.
  const double relative = dtype == DType::F32 ? 1e-5 : 1.0 / 128, absolute = 1e-9;
  const Problem large = problem(kRows);
  const std::vector<double> got = grad_of_sum(large, device, dtype);
  const std::vector<double> want = reference(large, dtype);
  ASSERT_EQ(got.size(), want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= relative * std::abs(want[i]) + absolute) && bad++ < 5) {
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0u);
  // The first rows alone are under the threshold (the compare path): the same bits.
  const Problem small = problem(3);
  const std::vector<double> small_got = grad_of_sum(small, device, dtype);
  for (std::size_t i = 0; i < small_got.size(); ++i) {
    ASSERT_EQ(small_got[i], got[i]) << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(DTypesAndFusion, CrossEntropyGrad,
                         ::testing::Combine(::testing::Values(DType::F32, DType::BF16),
                                            ::testing::Bool()));

}  // namespace cross_entropy_grad
}  // namespace kiln::autodiff_test
