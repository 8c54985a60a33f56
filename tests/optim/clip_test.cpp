// Gradient clipping by global norm and by value, against sums written out in float64.
#include <kiln/optim/clip.h>

#include <algorithm>

#include "toy_module.h"

namespace kiln::optim {
namespace {

using namespace testing;

const std::vector<double> kGradW = {3.0, -4.0, 0.5, 1.5, -2.0, 0.25};
const std::vector<double> kGradB = {-1.0, 2.5, 0.75};
const std::vector<double> kGradOther = {10.0, -20.0};

// Gradients for w, b and a leaf outside the module.
struct ClipCase {
  Toy toy = make_toy();
  Tensor<1> other =
      tensor_of<1>({1.0, 1.0}, Shape{2}, DType::F64).to_device(kCpu.autodiff()).require_grad();
  Gradients grads;

  explicit ClipCase(double scale = 1.0) {
    auto scaled = [&](std::vector<double> v) {
      for (double& x : v) x *= scale;
      return v;
    };
    kiln::detail::grad_replace(toy.w.primitive(), grads,
                               tensor_of<2>(scaled(kGradW), Shape{2, 3}, DType::F64).primitive());
    kiln::detail::grad_replace(toy.b.primitive(), grads,
                               tensor_of<1>(scaled(kGradB), Shape{3}, DType::F64).primitive());
    kiln::detail::grad_replace(other.primitive(), grads,
                               tensor_of<1>(kGradOther, Shape{2}, DType::F64).primitive());
  }
  std::vector<double> grad_of(const Primitive& p) const {
    return values(*kiln::detail::grad(p, grads));
  }
};

double p_norm(double p, double scale = 1.0) {
  double total = 0;
  for (const auto* v : {&kGradW, &kGradB}) {
    for (double x : *v) {
      total = std::isinf(p) ? std::max(total, std::abs(x * scale))
                            : total + std::pow(std::abs(x * scale), p);
    }
  }
  return std::isinf(p) ? total : std::pow(total, 1.0 / p);
}

TEST(OptimClip, ScalesByTheGlobalNormAndReturnsIt) {
  for (double p : {2.0, 1.0, 3.0, static_cast<double>(INFINITY)}) {
    ClipCase s;
    const double max_norm = 1.5;
    const double total = clip_grad_norm(s.toy, s.grads, max_norm, {.norm_type = p});
    const double expected_total = p_norm(p);
    EXPECT_NEAR(total, expected_total, 1e-12 * expected_total) << "p = " << p;
    const double coefficient = max_norm / (expected_total + 1e-6);
    auto expect_scaled = [&](const std::vector<double>& got, const std::vector<double>& original) {
      ASSERT_EQ(got.size(), original.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], original[i] * coefficient, 1e-14) << "p = " << p << " [" << i << "]";
      }
    };
    expect_scaled(s.grad_of(s.toy.w.primitive()), kGradW);
    expect_scaled(s.grad_of(s.toy.b.primitive()), kGradB);
    EXPECT_EQ(s.grad_of(s.other.primitive()), kGradOther);  // not a parameter of the module
    EXPECT_FALSE(kiln::detail::grad(s.toy.unused.primitive(), s.grads).has_value());
    // The clipped gradients now have (almost exactly) max_norm as their norm.
    EXPECT_NEAR(clip_grad_norm(s.toy, s.grads, 1e9, {.norm_type = p}), max_norm, 1e-5);
  }
}

TEST(OptimClip, LeavesGradientsBelowTheThresholdUntouched) {
  ClipCase s;
  const double total = p_norm(2.0);
  const Primitive w_grad = *kiln::detail::grad(s.toy.w.primitive(), s.grads);
  EXPECT_NEAR(clip_grad_norm(s.toy, s.grads, total + 1e-3), total, 1e-12);
  // The very same tensor: nothing was rewritten.
  EXPECT_EQ(*kiln::detail::grad(s.toy.w.primitive(), s.grads), w_grad);
  EXPECT_EQ(s.grad_of(s.toy.b.primitive()), kGradB);
  // Just below the threshold PyTorch's 1e-6 still scales, by max_norm / (total + 1e-6).
  ClipCase t;
  clip_grad_norm(t.toy, t.grads, total);
  EXPECT_NEAR(t.grad_of(t.toy.b.primitive())[1], kGradB[1] * total / (total + 1e-6), 1e-13);
  EXPECT_LT(std::abs(t.grad_of(t.toy.b.primitive())[1]), std::abs(kGradB[1]));
}

TEST(OptimClip, WorksOnRealBackwardGradientsAndInFloat32) {
  Toy toy = make_toy(DType::F32);
  Gradients grads = toy_backward(toy, 2);
  const std::vector<double> g = toy_gradient(theta_of(toy), 2);
  double sq = 0;
  for (double x : g) sq += x * x;
  const double total = clip_grad_norm(toy, grads, 0.5);
  EXPECT_NEAR(total, std::sqrt(sq), 1e-5 * std::sqrt(sq));
  const std::vector<double> clipped = values(*kiln::detail::grad(toy.w.primitive(), grads));
  for (std::size_t i = 0; i < clipped.size(); ++i) {
    EXPECT_NEAR(clipped[i], g[i] * 0.5 / (std::sqrt(sq) + 1e-6), 1e-6) << i;
  }
  EXPECT_EQ((*kiln::detail::grad(toy.w.primitive(), grads))->dtype(), DType::F32);
  // No parameter with a gradient: the norm is 0.
  Gradients none;
  EXPECT_EQ(clip_grad_norm(toy, none, 1.0), 0.0);
}

TEST(OptimClip, NonFiniteNorms) {
  ClipCase s;
  kiln::detail::grad_replace(
      s.toy.b.primitive(), s.grads,
      tensor_of<1>({1.0, std::nan(""), 2.0}, Shape{3}, DType::F64).primitive());
  EXPECT_THROW(clip_grad_norm(s.toy, s.grads, 1.0, {.error_if_nonfinite = true}), InvalidArgument);
  // Without the check the NaN spreads to every clipped gradient, as in PyTorch.
  EXPECT_TRUE(std::isnan(clip_grad_norm(s.toy, s.grads, 1.0)));
  for (double x : s.grad_of(s.toy.w.primitive())) EXPECT_TRUE(std::isnan(x));
}

TEST(OptimClip, ClampsByValue) {
  ClipCase s(2.0);
  clip_grad_value(s.toy, s.grads, 3.0);
  auto expect_clamped = [](const std::vector<double>& got, const std::vector<double>& original) {
    ASSERT_EQ(got.size(), original.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i], std::clamp(original[i] * 2.0, -3.0, 3.0)) << i;
    }
  };
  expect_clamped(s.grad_of(s.toy.w.primitive()), kGradW);
  expect_clamped(s.grad_of(s.toy.b.primitive()), kGradB);
  EXPECT_EQ(s.grad_of(s.other.primitive()), kGradOther);
}

struct ClipTied {
  nn::Param<1> first;
  nn::Param<1> second;
  KILN_MODULE(first, second)
};

TEST(OptimClip, CountsATiedParameterOnce) {
  ClipTied tied =
      nn::train(ClipTied{nn::Param<1>(tensor_of<1>({3.0, 4.0}, Shape{2}, DType::F64)), {}});
  tied.second = tied.first.val();
  Gradients grads;
  kiln::detail::grad_replace(tied.first.primitive(), grads,
                             tensor_of<1>({3.0, 4.0}, Shape{2}, DType::F64).primitive());
  EXPECT_NEAR(clip_grad_norm(tied, grads, 1.0), 5.0, 1e-15);  // not 5·√2
  const std::vector<double> g = values(*kiln::detail::grad(tied.second.primitive(), grads));
  EXPECT_NEAR(g[0], 3.0 / (5.0 + 1e-6), 1e-15);  // scaled once
}

TEST(OptimClip, RejectsBadArguments) {
  ClipCase s;
  EXPECT_THROW(clip_grad_norm(s.toy, s.grads, -1.0), InvalidArgument);
  EXPECT_THROW(clip_grad_norm(s.toy, s.grads, std::nan("")), InvalidArgument);
  EXPECT_THROW(clip_grad_norm(s.toy, s.grads, 1.0, {.norm_type = 0.0}), InvalidArgument);
  EXPECT_THROW(clip_grad_norm(s.toy, s.grads, 1.0, {.norm_type = -2.0}), InvalidArgument);
  EXPECT_THROW(clip_grad_value(s.toy, s.grads, -0.5), InvalidArgument);
  EXPECT_EQ(s.grad_of(s.toy.w.primitive()), kGradW);
}

}  // namespace
}  // namespace kiln::optim
