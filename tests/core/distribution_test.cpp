// Distributions refuse parameters that describe no distribution, at the factory and at random(),
// and the edge cases that are valid (a zero width, a zero deviation, certain outcomes) sample
// exactly what they describe.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "support/devices.h"
#include "support/error_message.h"

namespace kiln {
namespace {

using kiln::test::kCpu;
constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::nan("");

std::string message_of(const std::function<void()>& f) {
  return test::message_of<InvalidArgument>(f);
}

TEST(Distribution, UniformRefusesLowAboveHighAndBoundsThatAreNotFinite) {
  EXPECT_EQ(message_of([] { (void)Distribution::uniform(1, 0); }),
            "[Distribution::uniform] uniform low 1 is greater than high 0");
  EXPECT_EQ(message_of([] { (void)Distribution::uniform(-0.5, -2.25); }),
            "[Distribution::uniform] uniform low -0.5 is greater than high -2.25");
  EXPECT_EQ(message_of([&] { (void)Distribution::uniform(kNaN, 1); }),
            "[Distribution::uniform] uniform bounds nan and 1 must be finite");
  EXPECT_EQ(message_of([&] { (void)Distribution::uniform(0, kInf); }),
            "[Distribution::uniform] uniform bounds 0 and inf must be finite");
  EXPECT_EQ(message_of([&] { (void)Distribution::uniform(-kInf, kInf); }),
            "[Distribution::uniform] uniform bounds -inf and inf must be finite");
  // Both bounds finite, their width not: samples would be inf.
  const double big = std::numeric_limits<double>::max();
  EXPECT_NE(message_of([&] {
              (void)Distribution::uniform(-big, big);
            }).find("[Distribution::uniform] uniform width"),
            std::string::npos);
  EXPECT_EQ(message_of([&] { (void)Distribution::uniform(0, big); }), "no error");
}

TEST(Distribution, NormalRefusesANegativeOrNonFiniteDeviationAndMean) {
  EXPECT_EQ(message_of([] { (void)Distribution::normal(0, -1); }),
            "[Distribution::normal] normal standard deviation -1 must be a finite number >= 0");
  EXPECT_NE(message_of([&] { (void)Distribution::normal(0, kNaN); }).find("deviation nan"),
            std::string::npos);
  EXPECT_NE(message_of([&] { (void)Distribution::normal(0, kInf); }).find("deviation inf"),
            std::string::npos);
  EXPECT_EQ(message_of([&] { (void)Distribution::normal(kNaN, 1); }),
            "[Distribution::normal] normal mean nan must be finite");
  EXPECT_EQ(message_of([&] { (void)Distribution::normal(-kInf, 1); }),
            "[Distribution::normal] normal mean -inf must be finite");
}

TEST(Distribution, BernoulliRefusesAProbabilityOutsideZeroToOne) {
  EXPECT_EQ(message_of([] { (void)Distribution::bernoulli(1.5); }),
            "[Distribution::bernoulli] bernoulli probability 1.5 is not in [0, 1]");
  EXPECT_NE(message_of([] { (void)Distribution::bernoulli(-0.25); }).find("-0.25"),
            std::string::npos);
  EXPECT_NE(message_of([&] { (void)Distribution::bernoulli(kNaN); }).find("nan"),
            std::string::npos);
}

// A Distribution built field by field does not bypass the checks: random() makes them too.
TEST(Distribution, RandomChecksADistributionBuiltByHand) {
  const Distribution reversed{Distribution::Kind::Uniform, 1, 0};
  EXPECT_EQ(message_of([&] { (void)Tensor<1>::random({4}, reversed, kCpu); }),
            "[random] uniform low 1 is greater than high 0");
  const Distribution negative{Distribution::Kind::Normal, 0, -2};
  EXPECT_NE(message_of([&] {
              (void)Tensor<2>::random({2, 2}, negative, kCpu);
            }).find("[random] normal standard deviation -2"),
            std::string::npos);
  const Distribution unlikely{Distribution::Kind::Bernoulli, 2, 0};
  EXPECT_NE(message_of([&] {
              (void)Tensor<1, Int>::random({3}, unlikely, kCpu);
            }).find("[random] bernoulli probability 2"),
            std::string::npos);
  // Even an empty tensor: the distribution is wrong whatever the shape.
  EXPECT_NE(message_of([&] { (void)Tensor<1>::random({0}, reversed, kCpu); }).find("[random]"),
            std::string::npos);
}

std::vector<double> sample(const Distribution& d) {
  return Tensor<1>::random({257}, d, kCpu, DType::F64).into_data().to_f64_vec();
}

TEST(Distribution, ValidEdgeCasesSampleWhatTheyDescribe) {
  for (double v : sample(Distribution::uniform(2.5, 2.5))) EXPECT_EQ(v, 2.5);
  for (double v : sample(Distribution::normal(-3, 0))) EXPECT_EQ(v, -3);
  for (double v : sample(Distribution::bernoulli(0))) EXPECT_EQ(v, 0);
  for (double v : sample(Distribution::bernoulli(1))) EXPECT_EQ(v, 1);
  for (double v : sample(Distribution::uniform(-1, 3))) {
    EXPECT_GE(v, -1);
    EXPECT_LT(v, 3);
  }
  // The default is uniform on [0, 1) and has nothing to check.
  for (double v : sample(Distribution::standard())) {
    EXPECT_GE(v, 0);
    EXPECT_LT(v, 1);
  }
}

}  // namespace
}  // namespace kiln
