// The public autodiff API on Tensor: which tensors are tracked, what backward returns, how
// Gradients are read, replaced and removed, and how plain tensors mix with tracked ones. Every
// expected gradient is worked out by hand (closed forms in double).
#include <cmath>

#include "decorators/autodiff/test_support.h"

namespace kiln::autodiff_test {
namespace {

const std::vector<double> kX = {0.5, -1.25, 2.0, 0.75, -0.5, 1.5};

TEST(AutodiffApi, BackendNameNamesTheChain) {
  EXPECT_EQ(kAd.backend_name(), "autodiff<cpu>");
  EXPECT_EQ(kCpu.backend_name(), "cpu");
  EXPECT_TRUE(kAd.is_autodiff());
  EXPECT_EQ(kAd.without_autodiff(), kCpu);
}

TEST(AutodiffApi, RequireGradMakesATrackedLeafAndLeavesTheOriginalAlone) {
  const auto plain = tensor<2>(kX, {2, 3});
  EXPECT_FALSE(plain.is_require_grad())
      << "a tensor on an autodiff device is not tracked by itself";
  const auto x = plain.require_grad();
  EXPECT_TRUE(x.is_require_grad());
  EXPECT_FALSE(plain.is_require_grad()) << "require_grad returns a new tensor";
  EXPECT_EQ(x.device(), kAd);
  EXPECT_EQ(x.shape(), (Shape{2, 3}));
  EXPECT_EQ(values(x), kX);

  // Asking again gives the same leaf: its gradient is found through either handle.
  const auto again = x.require_grad();
  const Gradients g = (again * 3.0).sum().backward();
  ASSERT_TRUE(x.grad(g).has_value());
  EXPECT_EQ(values(*x.grad(g)), std::vector<double>(6, 3.0));

  // set_require_grad(false) cuts it loose.
  const auto off = x.set_require_grad(false);
  EXPECT_FALSE(off.is_require_grad());
  EXPECT_EQ(values(off), kX);
  EXPECT_TRUE(plain.set_require_grad(true).is_require_grad());
}

TEST(AutodiffApi, ResultsOfTrackedInputsAreTrackedAndOthersAreNot) {
  const auto x = tensor<2>(kX, {2, 3}).require_grad();
  const auto c = tensor<2>(kX, {2, 3});
  EXPECT_TRUE((x + c).is_require_grad());
  EXPECT_TRUE(x.exp().is_require_grad());
  EXPECT_TRUE(x.sum().is_require_grad());
  EXPECT_FALSE((c * c).exp().is_require_grad());
  EXPECT_FALSE(x.greater_elem(0.0).is_require_grad()) << "a comparison carries no gradient";
}

TEST(AutodiffApi, BackwardOfASquareGivesTwiceTheInput) {
  const auto x = tensor<2>(kX, {2, 3}).require_grad();
  const Gradients g = (x * x).sum().backward();
  EXPECT_EQ(g.size(), 1u);
  const auto gx = grad_of(x, g);
  EXPECT_EQ(gx.shape(), x.shape());
  EXPECT_EQ(gx.device(), kAd);
  EXPECT_FALSE(gx.is_require_grad()) << "a plain backward gives constants";
  std::vector<double> want;
  for (double v : kX) want.push_back(2 * v);
  expect_close(values(gx), want, 1e-6, "d/dx sum(x*x)");
}

// exp saves its output for backward. An op on the moved result holds the only tensor handle,
// so the inner backend would be free to write it in place were it not also the saved value: the
// gradient (exp(x), read from that saved output) shows whether it was overwritten.
TEST(AutodiffApi, SavedOutputsSurviveOpsOnMovedHandles) {
  const auto x = tensor<1>(kX, {6}).require_grad();
  std::vector<double> want;
  for (double v : kX) want.push_back(std::exp(v));

  auto e1 = x.exp();
  const auto plus_one = std::move(e1).add_scalar(1.0);
  expect_close(values(grad_of(x, plus_one.sum().backward())), want, 1e-6, "exp then +1");

  auto e2 = x.exp();
  const auto other = tensor<1>(kX, {6});
  const auto sum = std::move(e2).add(other);
  expect_close(values(grad_of(x, sum.sum().backward())), want, 1e-6, "exp then + tensor");

  auto e3 = x.exp();
  const auto neg = std::move(e3).neg();
  std::vector<double> want_neg;
  for (double v : want) want_neg.push_back(-v);
  expect_close(values(grad_of(x, neg.sum().backward())), want_neg, 1e-6, "exp then neg");

  const auto twice = [&] {
    const auto e4 = x.exp();
    return e4.add(e4);  // the same wrapper as both operands
  }();
  std::vector<double> want_twice;
  for (double v : want) want_twice.push_back(2 * v);
  expect_close(values(grad_of(x, twice.sum().backward())), want_twice, 1e-6, "e + e");
}

TEST(AutodiffApi, GradientsAccumulateOverEveryUseOfALeaf) {
  const auto x = tensor<1>(kX, {6}).require_grad();
  // x three times in one product: d/dx x³ = 3x².
  const Gradients cube = (x * x * x).sum().backward();
  // x in two branches: d/dx (sin x + exp x) = cos x + exp x.
  const Gradients branches = (x.sin() + x.exp()).sum().backward();
  // One branch stops at detach: d/dx (x * detach(x)) = detach(x).
  const Gradients half = (x * x.detach()).sum().backward();
  std::vector<double> want_cube, want_branches;
  for (double v : kX) {
    want_cube.push_back(3 * v * v);
    want_branches.push_back(std::cos(v) + std::exp(v));
  }
  expect_close(values(grad_of(x, cube)), want_cube, 1e-6, "x*x*x");
  expect_close(values(grad_of(x, branches)), want_branches, 1e-6, "sin x + exp x");
  expect_close(values(grad_of(x, half)), kX, 1e-6, "x * detach(x)");
}

TEST(AutodiffApi, ALeafReachedThroughSeveralPathsOfDifferentLengthsGetsOneSum) {
  // y = 2x, z = y * x, loss = sum(z + y + x) = sum(2x² + 3x): gradient 4x + 3.
  const auto x = tensor<1>(kX, {6}).require_grad();
  const auto y = x * 2.0;
  const Gradients g = (y * x + y + x).sum().backward();
  std::vector<double> want;
  for (double v : kX) want.push_back(4 * v + 3);
  expect_close(values(grad_of(x, g)), want, 1e-6, "4x + 3");
}

TEST(AutodiffApi, PlainTensorsOfTheSameHardwareActAsConstants) {
  const auto x = tensor<2>(kX, {2, 3}).require_grad();
  const std::vector<double> cv = {1, 2, 3, 4, 5, 6};
  const auto c = tensor<2>(cv, {2, 3}, kCpu);  // not on the autodiff device at all
  const auto u = tensor<2>(cv, {2, 3});        // on it, but not tracked
  const auto y = x * c + u;
  EXPECT_TRUE(y.is_require_grad()) << "the graph goes on through a plain operand";
  EXPECT_EQ(y.device(), kAd);
  const Gradients g = (y * y).sum().backward();
  EXPECT_EQ(g.size(), 1u) << "only the leaf has a gradient";
  EXPECT_FALSE(c.grad(g).has_value());
  EXPECT_FALSE(u.grad(g).has_value());
  // d/dx sum((x c + u)²) = 2 (x c + u) c
  std::vector<double> want;
  for (std::size_t i = 0; i < kX.size(); ++i) want.push_back(2 * (kX[i] * cv[i] + cv[i]) * cv[i]);
  expect_close(values(grad_of(x, g)), want, 1e-5, "constant operands");
  // The constants themselves are untouched.
  EXPECT_EQ(values(c), cv);
  EXPECT_EQ(c.device(), kCpu);
}

TEST(AutodiffApi, BackwardWithASeedOnANonScalar) {
  const auto x = tensor<2>(kX, {2, 3}).require_grad();
  const std::vector<double> sv = {1, -1, 0.5, 2, 0, -3};
  // The seed may be plain or on the autodiff device, and of another float dtype.
  for (const auto& seed : {tensor<2>(sv, {2, 3}), tensor<2>(sv, {2, 3}, kCpu),
                           tensor<2>(sv, {2, 3}, kAd, DType::F64)}) {
    const Gradients g = (x * x).backward(seed);
    const auto gx = grad_of(x, g);
    EXPECT_EQ(gx.dtype(), DType::F32);
    std::vector<double> want;
    for (std::size_t i = 0; i < kX.size(); ++i) want.push_back(2 * kX[i] * sv[i]);
    expect_close(values(gx), want, 1e-6, "seeded x*x");
  }
}

TEST(AutodiffApi, LeavesOutsideTheGraphHaveNoGradient) {
  const auto x = tensor<1>(kX, {6}).require_grad();
  const auto unused = tensor<1>(kX, {6}).require_grad();
  const auto cut = tensor<1>(kX, {6}).require_grad();
  // cut only reaches the loss through detach: that branch is untracked.
  const auto loss = (x * 3.0).sum() + (cut.detach() * 5.0).sum() + (tensor<1>(kX, {6}) * 7.0).sum();
  const Gradients g = loss.backward();
  EXPECT_EQ(g.size(), 1u);
  EXPECT_FALSE(g.empty());
  EXPECT_EQ(values(grad_of(x, g)), std::vector<double>(6, 3.0));
  EXPECT_FALSE(unused.grad(g).has_value());
  EXPECT_FALSE(cut.grad(g).has_value());
  // An intermediate tensor is not a leaf: grad() finds nothing for it.
  const auto mid = x * 2.0;
  const Gradients g2 = mid.sum().backward();
  EXPECT_FALSE(mid.grad(g2).has_value());
  EXPECT_TRUE(x.grad(g2).has_value());
}

TEST(AutodiffApi, GradRemoveTakesTheGradientOut) {
  const auto x = tensor<1>(kX, {6}).require_grad();
  const auto y = tensor<1>(kX, {6}).require_grad();
  Gradients g = (x * 2.0 + y * 3.0).sum().backward();
  ASSERT_EQ(g.size(), 2u);
  const auto removed = x.grad_remove(g);
  ASSERT_TRUE(removed.has_value());
  EXPECT_EQ(values(*removed), std::vector<double>(6, 2.0));
  EXPECT_EQ(g.size(), 1u);
  EXPECT_FALSE(x.grad(g).has_value());
  EXPECT_FALSE(x.grad_remove(g).has_value()) << "a second remove finds nothing";
  EXPECT_EQ(values(grad_of(y, g)), std::vector<double>(6, 3.0));
  // Removing through a non-leaf finds nothing and changes nothing.
  EXPECT_FALSE((y * 1.0).grad_remove(g).has_value());
  EXPECT_EQ(g.size(), 1u);
}

TEST(AutodiffApi, GradReplaceStoresTheGivenGradient) {
  const auto x = tensor<2>(kX, {2, 3}).require_grad();
  Gradients g = (x * 2.0).sum().backward();
  const std::vector<double> clipped = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6};
  x.grad_replace(g, tensor<2>(clipped, {2, 3}, kCpu));  // a plain tensor is accepted
  const auto gx = grad_of(x, g);
  EXPECT_EQ(gx.device(), kAd) << "the stored gradient lives on the leaf's device";
  expect_close(values(gx), clipped, 1e-7, "replaced");
  // Replacing a gradient the pass did not produce adds one.
  const auto other = tensor<2>(kX, {2, 3}).require_grad();
  other.grad_replace(g, tensor<2>(clipped, {2, 3}));
  EXPECT_EQ(g.size(), 2u);
  expect_close(values(grad_of(other, g)), clipped, 1e-7, "added");
}

TEST(AutodiffApi, InnerAndFromInnerMoveBetweenTheDeviceForms) {
  const auto x = tensor<2>(kX, {2, 3}).require_grad();
  const auto in = x.inner();
  EXPECT_EQ(in.device(), kCpu);
  EXPECT_FALSE(in.is_require_grad());
  EXPECT_EQ(values(in), kX);
  // A plain tensor is its own inner.
  const auto p = tensor<2>(kX, {2, 3}, kCpu);
  EXPECT_EQ(p.inner().device(), kCpu);
  EXPECT_EQ(p.inner().primitive(), p.primitive());

  const auto back = Tensor<2>::from_inner(in);
  EXPECT_EQ(back.device(), kAd);
  EXPECT_FALSE(back.is_require_grad()) << "from_inner gives an untracked tensor";
  EXPECT_EQ(values(back), kX);
  // It can become a leaf of its own, independent of x.
  const auto leaf = back.require_grad();
  const Gradients g = (leaf * x).sum().backward();
  expect_close(values(grad_of(leaf, g)), kX, 1e-7, "leaf from inner");
  expect_close(values(grad_of(x, g)), kX, 1e-7, "x");
}

TEST(AutodiffApi, GradientsHaveTheLeafsDtype) {
  for (DType dtype : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const auto x = tensor<1>({0.5, 1.0, 1.5, 2.0}, {4}, kAd, dtype).require_grad();
    const Gradients g = (x * x * 0.5).sum().backward();
    const auto gx = grad_of(x, g);
    EXPECT_EQ(gx.dtype(), dtype);
    // x is exact in every dtype here, and so is x (the gradient of x²/2).
    EXPECT_EQ(values(gx), (std::vector<double>{0.5, 1.0, 1.5, 2.0}));

    // Through a cast to f32 and back the gradient still returns in the leaf's dtype.
    const Gradients through_cast = (x.cast(DType::F32) * 4.0).sum().backward();
    EXPECT_EQ(grad_of(x, through_cast).dtype(), dtype);
    EXPECT_EQ(values(grad_of(x, through_cast)), std::vector<double>(4, 4.0));
  }
}

TEST(AutodiffApi, ALeafTakesPartInSuccessiveGraphs) {
  const auto x = tensor<1>(kX, {6}).require_grad();
  for (int step = 1; step <= 3; ++step) {
    const Gradients g = (x * static_cast<double>(step)).sum().backward();
    EXPECT_EQ(values(grad_of(x, g)), std::vector<double>(6, static_cast<double>(step)));
  }
}

TEST(AutodiffApi, MatmulAndBroadcastGradients) {
  // loss = sum(A X + b) with b broadcast over rows: dX = Aᵀ 1, db = number of rows.
  const std::vector<double> av = {1, 2, -1, 0.5, 3, -2};  // [2, 3]
  const std::vector<double> xv = {0.5, -1, 2, 1, 0, 3};   // [3, 2]
  const auto a = tensor<2>(av, {2, 3}).require_grad();
  const auto x = tensor<2>(xv, {3, 2}).require_grad();
  const auto b = tensor<2>({10, 20}, {1, 2}).require_grad();
  const Gradients g = (a.matmul(x) + b).sum().backward();
  // d/dA_ik = sum_j X_kj; d/dX_kj = sum_i A_ik.
  std::vector<double> want_a, want_x;
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 3; ++k) want_a.push_back(xv[k * 2] + xv[k * 2 + 1]);
  for (int k = 0; k < 3; ++k)
    for (int j = 0; j < 2; ++j) want_x.push_back(av[k] + av[3 + k]);
  expect_close(values(grad_of(a, g)), want_a, 1e-6, "dA");
  expect_close(values(grad_of(x, g)), want_x, 1e-6, "dX");
  EXPECT_EQ(grad_of(b, g).shape(), (Shape{1, 2}));
  EXPECT_EQ(values(grad_of(b, g)), (std::vector<double>{2, 2}));
}

}  // namespace
}  // namespace kiln::autodiff_test
