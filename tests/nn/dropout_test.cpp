// Dropout: the fraction zeroed, the 1 / (1 - p) scaling, identity in evaluation, seeding through
// the device generator, and its gradient.
#include <kiln/nn/dropout.h>

#include "nn/layer_test_util.h"

namespace kiln::nn {
namespace {

using testing::kCpu;

TEST(NnDropout, ZeroesAboutPAndScalesTheRestInTraining) {
  const Device ad = kCpu.autodiff();
  for (double p : {0.1, 0.3, 0.75}) {
    const Tensor<2> x = Tensor<2>::ones({200, 500}, ad);
    const std::vector<double> y = testing::read(Dropout{p}.forward(x));
    std::size_t zeros = 0;
    for (double v : y) {
      if (v == 0.0) {
        ++zeros;
      } else {
        EXPECT_NEAR(v, 1.0 / (1.0 - p), 1e-6) << p;
      }
    }
    // 100,000 draws: the fraction's standard deviation is below 0.0016, so 0.008 is 5 of them.
    EXPECT_NEAR(static_cast<double>(zeros) / static_cast<double>(y.size()), p, 0.008) << p;
  }
}

TEST(NnDropout, IsTheIdentityInEvaluationAndAtZero) {
  const std::vector<double> v = testing::values(64, 1);
  const Tensor<2> x = testing::tensor<2>(v, {8, 8});
  EXPECT_EQ(testing::read(Dropout{0.5}.forward(x)), v);
  EXPECT_EQ(testing::read(Dropout{0.0}.forward(testing::tensor<2>(v, {8, 8}, kCpu.autodiff()))), v);
  // p = 1 drops everything (no division by zero).
  EXPECT_EQ(testing::read(Dropout{1.0}.forward(testing::tensor<2>(v, {8, 8}, kCpu.autodiff()))),
            std::vector<double>(64, 0.0));
}

TEST(NnDropout, MasksFollowTheDeviceSeed) {
  const Device ad = kCpu.autodiff();
  const Tensor<1> x = Tensor<1>::ones({1000}, ad);
  ad.seed(5);
  const std::vector<double> first = testing::read(Dropout{0.5}.forward(x));
  ad.seed(5);
  const std::vector<double> again = testing::read(Dropout{0.5}.forward(x));
  ad.seed(6);
  const std::vector<double> other = testing::read(Dropout{0.5}.forward(x));
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
}

TEST(NnDropout, GradientIsTheMaskOverOneMinusP) {
  const Tensor<2> x =
      testing::tensor<2>(testing::values(300, 2), {10, 30}, kCpu.autodiff()).require_grad();
  const Tensor<2> y = Dropout{0.4}.forward(x);
  const Gradients g = y.sum().backward();
  // y = x * mask / (1 - p), so dy/dx is y / x elementwise.
  const std::vector<double> gx = testing::read(*x.grad(g)), yv = testing::read(y),
                            xv = testing::read(x);
  for (std::size_t i = 0; i < gx.size(); ++i) {
    EXPECT_NEAR(gx[i], yv[i] / xv[i], 1e-5) << i;
    EXPECT_TRUE(gx[i] == 0.0 || std::abs(gx[i] - 1.0 / 0.6) < 1e-6) << gx[i];
  }
}

TEST(NnDropout, RejectsProbabilitiesOutsideTheUnitInterval) {
  const Tensor<1> x = Tensor<1>::ones({4}, kCpu.autodiff());
  EXPECT_THROW(Dropout{1.5}.forward(x), InvalidArgument);
  EXPECT_THROW(Dropout{-0.1}.forward(x), InvalidArgument);
}

}  // namespace
}  // namespace kiln::nn
