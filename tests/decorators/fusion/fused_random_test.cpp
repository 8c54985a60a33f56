// random on a fused device: recorded like an elementwise op, its place in the device's random
// stream reserved at the call, so a fused program draws bit for bit what the unfused device draws
// (every distribution and dtype, sizes across the piece and tile boundaries and the parallel
// split), whatever runs between the call and the read (an eager draw, another group, a seed);
// and a dropout is one group.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <string>
#include <vector>

#include "contract/fused_program.h"
#include "decorators/fusion/fusion_test_support.h"
#include "support/spread.h"

namespace kiln::fused_random_test {
namespace {

using fusion_test::fusion_backend;
using fusion_test::groups;
using fusion_test::kFused;
using fusion_test::kPlain;

// The stored bytes of a read, for bit-for-bit comparisons.
std::vector<std::byte> bytes(const TensorData& data) {
  const auto b = data.bytes();
  return {b.begin(), b.end()};
}

::testing::AssertionResult same_bits(const std::vector<std::byte>& got,
                                     const std::vector<std::byte>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << got.size() << " bytes, want " << want.size();
  }
  const auto at = std::mismatch(got.begin(), got.end(), want.begin()).first;
  if (at != got.end()) {
    return ::testing::AssertionFailure()
           << "byte " << (at - got.begin()) << " of " << got.size() << " differs";
  }
  return ::testing::AssertionSuccess();
}

// The checker on for one test: every fused group also runs step by step and must agree.
struct Checked {
  Checked() { fusion_backend().set_check(true); }
  ~Checked() { fusion_backend().set_check(false); }
  Checked(const Checked&) = delete;
  Checked& operator=(const Checked&) = delete;
};

struct Case {
  Distribution distribution;
  std::string name;
};

std::vector<Case> cases_for(DType dtype) {
  const bool is_unsigned =
      dtype == DType::U8 || dtype == DType::U16 || dtype == DType::U32 || dtype == DType::U64;
  return {{Distribution::standard(), "standard"},
          {is_float(dtype) || is_unsigned ? Distribution::uniform(0, 100)
                                          : Distribution::uniform(-50, 50),
           "uniform"},
          {Distribution::normal(is_unsigned ? 60 : 1, is_float(dtype) ? 2 : 20), "normal"},
          {Distribution::bernoulli(0.3), "bernoulli"}};
}

struct Drawn {
  TensorData random, used;
};

// On device, after seed 77: r = random(shape), then a chain over r that the CPU runs piece by
// piece (r * 2 + 1: arithmetic kernels) or tile by tile (a comparison and a mask); the chain
// read first, so r is written by the chain's group as a held value.
template <std::size_t D, class K>
Drawn draw(Device device, const Shape& shape, const Distribution& distribution, DType dtype,
           bool tiles) {
  device.seed(77);
  const auto r = Tensor<D, K>::random(shape, distribution, device, dtype);
  const Tensor<D, K> used = tiles ? r.mask_fill(r.lower_elem(1), 3) : r * 2 + 1;
  TensorData u = used.into_data();
  return {r.into_data(), std::move(u)};
}

template <std::size_t D, class K>
void expect_fused_equals_unfused(const Shape& shape, DType dtype) {
  for (const Case& c : cases_for(dtype)) {
    for (bool tiles : {false, true}) {
      const Drawn fused = draw<D, K>(kFused, shape, c.distribution, dtype, tiles);
      const Drawn plain = draw<D, K>(kPlain, shape, c.distribution, dtype, tiles);
      const std::string what = c.name + " " + std::string(dtype_name(dtype)) + " " +
                               shape.to_string() + (tiles ? " compare-and-mask" : " arithmetic");
      ASSERT_EQ(fused.random.shape(), shape) << what;
      ASSERT_EQ(fused.random.dtype(), dtype) << what;
      EXPECT_TRUE(same_bits(bytes(fused.random), bytes(plain.random))) << what;
      EXPECT_TRUE(same_bits(bytes(fused.used), bytes(plain.used))) << what;
    }
  }
}

TEST(FusedRandom, EqualsTheUnfusedDeviceBitForBitForEveryDistributionAndDtype) {
  const Checked checked;
  const std::vector<Shape> flat = {Shape{0}, Shape{1}, Shape{4095}, Shape{4097},
                                   Shape{std::int64_t{1} << 17}};
  for (const Shape& shape : flat) {
    for (DType dtype : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
      expect_fused_equals_unfused<1, Float>(shape, dtype);
    }
    for (DType dtype : {DType::I64, DType::I32, DType::I16, DType::I8, DType::U64, DType::U32,
                        DType::U16, DType::U8}) {
      expect_fused_equals_unfused<1, Int>(shape, dtype);
    }
  }
  // Rows of tiles and pieces that start inside the draw (the tile's first flat index, rows
  // split over threads), and a rank-3 shape whose tiles fix a leading coordinate.
  for (DType dtype : {DType::F32, DType::BF16}) {
    expect_fused_equals_unfused<2, Float>(Shape{257, 513}, dtype);
    expect_fused_equals_unfused<3, Float>(Shape{3, 50, 701}, dtype);
  }
  expect_fused_equals_unfused<2, Int>(Shape{257, 513}, DType::I32);
}

TEST(FusedRandom, ARandomIsRecordedAndItsChainIsOneGroup) {
  kFused.seed(3);
  const std::uint64_t before = groups();
  const auto r = Tensor<2>::random({64, 300}, Distribution::normal(0, 1), kFused);
  const Tensor<2> y = (r * 0.5).exp() + r;
  EXPECT_EQ(groups(), before) << "recording draws nothing";
  const std::vector<double> got = y.into_data().to_f64_vec();
  EXPECT_EQ(groups(), before + 1) << "random and its chain ran as one group";
  kPlain.seed(3);
  const auto p = Tensor<2>::random({64, 300}, Distribution::normal(0, 1), kPlain);
  EXPECT_EQ(got, ((p * 0.5).exp() + p).into_data().to_f64_vec());
}

// Dropout as the issue writes it (uniform < p masks, the survivors scaled), and as nn::Dropout
// makes its mask (bernoulli(1 - p) times 1 / (1 - p), then a product).
Tensor<2> dropout_by_mask_fill(const Tensor<2>& x, double p) {
  const Tensor<2, Bool> drop =
      Tensor<2>::random(x.shape(), Distribution::standard(), x.device()).lower_elem(p);
  return x.mask_fill(drop, 0.0) / (1 - p);
}
Tensor<2> dropout_by_mask(const Tensor<2>& x, double p) {
  return x *
         (Tensor<2>::random(x.shape(), Distribution::bernoulli(1 - p), x.device()) * (1 / (1 - p)));
}

TEST(FusedRandom, ADropoutRunsAsOneGroupAndEqualsTheUnfusedDevice) {
  const Checked checked;
  const Shape shape{300, 700};
  const std::vector<double> v = test::spread(shape.num_elements(), 5, -3.0, 3.0);
  for (auto* dropout : {&dropout_by_mask_fill, &dropout_by_mask}) {
    const auto x = Tensor<2>::from_data(TensorData::from_vec(v, shape), kFused);
    kFused.seed(11);
    const std::uint64_t before = groups();
    const Tensor<2> y = dropout(x, 0.1);
    EXPECT_EQ(groups(), before);
    const TensorData got = y.into_data();
    EXPECT_EQ(groups(), before + 1) << "random, compare or scale, mask or product, scale";
    kPlain.seed(11);
    const TensorData want =
        dropout(Tensor<2>::from_data(TensorData::from_vec(v, shape), kPlain), 0.1).into_data();
    EXPECT_TRUE(same_bits(bytes(got), bytes(want)));
    // About a tenth dropped, the rest scaled by 1 / 0.9.
    const std::vector<double> out = got.to_f64_vec();
    const auto zeros = std::count(out.begin(), out.end(), 0.0);
    EXPECT_NEAR(static_cast<double>(zeros) / static_cast<double>(out.size()), 0.1, 0.01);
  }
}

TEST(FusedRandom, NnDropoutOverAutodiffAndFusionEqualsTheUnfusedOne) {
  const Shape shape{128, 256};
  const std::vector<double> v = test::spread(shape.num_elements(), 6, -1.0, 1.0);
  auto run = [&](Device device) {
    device.seed(12);
    const auto x = Tensor<2>::from_data(TensorData::from_vec(v, shape), device).require_grad();
    const Tensor<2> y = nn::Dropout{.p = 0.25}.forward(x);
    const Gradients g = (y * y).sum().backward();
    return std::pair{bytes(y.into_data()), bytes(x.grad(g)->into_data())};
  };
  const auto fused = run(kFused.autodiff()), plain = run(kPlain.autodiff());
  EXPECT_TRUE(same_bits(fused.first, plain.first)) << "the dropped values";
  EXPECT_TRUE(same_bits(fused.second, plain.second)) << "the gradient";
}

// The program of the order and seed tests: A recorded, then draws on the unfused device and B,
// then B read before A.
struct Reads {
  std::vector<std::byte> a, b, between;
};
Reads interleaved(Device device, bool reseed) {
  device.seed(9);
  const auto a = Tensor<1>::random({8192}, Distribution::normal(0, 1), device);
  if (reseed) device.seed(10);
  // Drawn at once: on the unfused device (the same stream), and too small to record.
  const auto between = Tensor<1>::random({100}, Distribution::uniform(-1, 1), kPlain);
  const auto small = Tensor<1>::random({10}, Distribution::standard(), device);
  const auto b = Tensor<1>::random({5000}, Distribution::standard(), device);
  Reads r;
  r.b = bytes(b.into_data());
  r.a = bytes(a.into_data());
  r.between = bytes(between.into_data());
  const auto s = bytes(small.into_data());
  r.between.insert(r.between.end(), s.begin(), s.end());
  return r;
}

TEST(FusedRandom, ARecordedRandomDrawsAtItsPlaceInTheProgram) {
  const std::uint64_t before = groups();
  const Reads fused = interleaved(kFused, false);
  EXPECT_EQ(groups(), before + 2) << "A and B were recorded, each read as its own group";
  const Reads plain = interleaved(kPlain, false);
  EXPECT_TRUE(same_bits(fused.a, plain.a)) << "draws between A's call and its read leave A";
  EXPECT_TRUE(same_bits(fused.b, plain.b)) << "B, read first, still draws after A";
  EXPECT_TRUE(same_bits(fused.between, plain.between));
}

TEST(FusedRandom, ASeedAfterTheCallDoesNotChangeARecordedRandom) {
  const Reads fused = interleaved(kFused, true);
  const Reads plain = interleaved(kPlain, true);
  EXPECT_TRUE(same_bits(fused.a, plain.a)) << "A was drawn under seed 9 at its call";
  EXPECT_TRUE(same_bits(fused.b, plain.b)) << "B under seed 10";
  EXPECT_TRUE(same_bits(fused.between, plain.between));
  // The seed did change what came after it.
  const Reads unseeded = interleaved(kFused, false);
  EXPECT_TRUE(same_bits(unseeded.a, fused.a));
  EXPECT_FALSE(same_bits(unseeded.b, fused.b));
}

TEST(FusedRandom, TheGroupDescribesItsDraw) {
  kFused.seed(4);
  std::string text;
  fusion_backend().set_result_hook_for_tests(
      [&](const FusedProgram& program, std::vector<Primitive>&) {
        text = kiln::describe(program);
      });
  const auto r = Tensor<1>::random({5000}, Distribution::bernoulli(0.25), kFused);
  (r + 1.0).into_data();
  fusion_backend().set_result_hook_for_tests(nullptr);
  EXPECT_NE(text.find("random(bernoulli 0.25"), std::string::npos) << text;
  EXPECT_NE(text.find("seed 4 from 0"), std::string::npos) << text;
}

}  // namespace
}  // namespace kiln::fused_random_test
