// Random tensors on the CPU: dev.seed(s) makes the following draws reproducible, different
// seeds and successive draws differ, and values respect the distribution's range; a place
// reserved in the stream draws later what the op drew there, and any part of a draw is drawn
// alike (what a fused group relies on).
#include "backends/cpu/random.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "contract/backend.h"
#include "runtime/registry.h"
#include "support/devices.h"

namespace kiln {
namespace {

using kiln::test::kCpu;

std::vector<double> draw(const Distribution& d, std::int64_t n = 50000, DType dtype = DType::F32) {
  return Tensor<1>::random({n}, d, kCpu, dtype).into_data().to_f64_vec();
}

TEST(CpuRandom, SameSeedSameValues) {
  for (const Distribution& d : {Distribution::standard(), Distribution::uniform(-2, 3),
                                Distribution::normal(1, 2), Distribution::bernoulli(0.3)}) {
    kCpu.seed(7);
    const auto first = draw(d);
    const auto second_draw = draw(d);
    kCpu.seed(7);
    EXPECT_EQ(draw(d), first) << "reseeding replays the sequence";
    EXPECT_EQ(draw(d), second_draw) << "and the draws after it";
  }
}

TEST(CpuRandom, DifferentSeedsAndSuccessiveDrawsDiffer) {
  kCpu.seed(7);
  const auto a = draw(Distribution::standard());
  const auto b = draw(Distribution::standard());
  kCpu.seed(8);
  const auto c = draw(Distribution::standard());
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  // Not just a shift of the same stream: few positions coincide.
  std::size_t same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) same += a[i] == c[i];
  EXPECT_LT(same, a.size() / 100);
}

TEST(CpuRandom, ReproducibleAcrossShapesOfTheSameCount) {
  // The stream depends on the element index, not on how the tensor is shaped.
  kCpu.seed(11);
  const auto flat = draw(Distribution::standard(), 4096);
  kCpu.seed(11);
  const auto square =
      Tensor<2>::random({64, 64}, Distribution::standard(), kCpu).into_data().to_f64_vec();
  EXPECT_EQ(flat, square);
}

TEST(CpuRandom, RangesAndMoments) {
  kCpu.seed(3);
  const auto unit = draw(Distribution::standard());
  EXPECT_GE(*std::min_element(unit.begin(), unit.end()), 0.0);
  EXPECT_LT(*std::max_element(unit.begin(), unit.end()), 1.0);

  const auto uniform = draw(Distribution::uniform(-2, 3), 50000, DType::F64);
  EXPECT_GE(*std::min_element(uniform.begin(), uniform.end()), -2.0);
  EXPECT_LT(*std::max_element(uniform.begin(), uniform.end()), 3.0);
  const double uniform_mean = std::accumulate(uniform.begin(), uniform.end(), 0.0) / uniform.size();
  EXPECT_NEAR(uniform_mean, 0.5, 0.05);  // standard error ~0.006

  const auto normal = draw(Distribution::normal(1, 2), 50000, DType::F64);
  const double mean = std::accumulate(normal.begin(), normal.end(), 0.0) / normal.size();
  double variance = 0;
  for (double v : normal) variance += (v - mean) * (v - mean);
  variance /= static_cast<double>(normal.size() - 1);
  EXPECT_NEAR(mean, 1.0, 0.05);
  EXPECT_NEAR(std::sqrt(variance), 2.0, 0.05);

  const auto coin = draw(Distribution::bernoulli(0.3));
  for (double v : coin) ASSERT_TRUE(v == 0.0 || v == 1.0);
  EXPECT_NEAR(std::accumulate(coin.begin(), coin.end(), 0.0) / coin.size(), 0.3, 0.02);
}

TEST(CpuRandom, IntTensorsHoldIntegersInRange) {
  kCpu.seed(5);
  const auto ints =
      Tensor<1, Int>::random({10000}, Distribution::uniform(0, 10), kCpu).into_data().to_f64_vec();
  for (double v : ints) {
    ASSERT_EQ(v, std::floor(v));
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 10.0);
  }
  EXPECT_EQ(*std::max_element(ints.begin(), ints.end()), 9.0) << "every value in [0, 10) occurs";
}

const std::vector<Distribution> kEveryRandomKind = {
    Distribution::standard(), Distribution::uniform(-2, 3), Distribution::normal(1, 2),
    Distribution::bernoulli(0.3)};
const std::vector<DType> kEveryRandomDType = {DType::F32, DType::F64, DType::F16, DType::BF16,
                                              DType::I64, DType::I32, DType::I8,  DType::U16};

std::vector<std::byte> drawn_bytes(const Primitive& p) {
  const TensorData data = backend_for(kCpu).into_data(p).get();
  return {data.bytes().begin(), data.bytes().end()};
}

TEST(CpuRandom, AReservedPlaceDrawsWhatTheOpDrewThere) {
  Backend& cpu = backend_for(kCpu);
  for (const Distribution& d : kEveryRandomKind) {
    for (DType dtype : kEveryRandomDType) {
      const std::string what =
          std::string(dtype_name(dtype)) + " kind " + std::to_string(static_cast<int>(d.kind));
      kCpu.seed(21);
      const std::vector<std::byte> first = drawn_bytes(cpu.random(Shape{5000}, d, dtype, kCpu));
      const std::vector<std::byte> second = drawn_bytes(cpu.random(Shape{300}, d, dtype, kCpu));
      kCpu.seed(21);
      const std::optional<RandomStream> at = cpu.reserve_random(5000);
      ASSERT_TRUE(at.has_value());
      EXPECT_EQ(at->first, 0u) << "a seed restarts the counter";
      const std::vector<std::byte> next = drawn_bytes(cpu.random(Shape{300}, d, dtype, kCpu));
      std::vector<std::byte> pinned, after_pin;
      {
        const DrawRandomAt pin(*at);
        pinned = drawn_bytes(cpu.random(Shape{5000}, d, dtype, kCpu));
        // The place is taken once: a second draw under the same pin draws from the stream.
        after_pin = drawn_bytes(cpu.random(Shape{300}, d, dtype, kCpu));
      }
      EXPECT_TRUE(pinned == first) << what;
      EXPECT_TRUE(next == second) << what << ": the op after a reservation draws after it";
      // (standard draws on integers are all zeros: nothing to tell apart)
      if (is_float(dtype)) {
        EXPECT_TRUE(after_pin != second) << what;
      }
      EXPECT_EQ(cpu.reserve_random(1)->first, 5600u) << what << ": the pin took no counters";
    }
  }
}

TEST(CpuRandom, AnyPartOfADrawIsDrawnAsTheWholeDrawDrawsIt) {
  Backend& cpu = backend_for(kCpu);
  constexpr std::int64_t kCount = 20000;  // several parallel chunks of the op
  for (const Distribution& d : kEveryRandomKind) {
    for (DType dtype : kEveryRandomDType) {
      kCpu.seed(33);
      const RandomStream at = *cpu.reserve_random(0);
      const std::vector<std::byte> whole = drawn_bytes(cpu.random(Shape{kCount}, d, dtype, kCpu));
      const auto size = static_cast<std::int64_t>(dtype_size(dtype));
      for (auto [begin, count] : {std::pair<std::int64_t, std::int64_t>{0, 1},
                                  {1, 255},
                                  {4095, 2},
                                  {4096, 4096},
                                  {kCount - 7, 7},
                                  {0, kCount}}) {
        std::vector<std::byte> part(static_cast<std::size_t>(count * size));
        cpu::draw_random(part.data(), dtype, d, at, begin, count);
        EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + begin * size))
            << dtype_name(dtype) << " kind " << static_cast<int>(d.kind) << " from " << begin;
      }
    }
  }
}

// The normal draw is Box-Muller over the stream's uniforms: value i is
// a + b sqrt(-2 ln(1 - u(2c))) cos(2 pi u(2c + 1)) for its counter c, here in long double with the
// scalar functions against the draw's vector ones (within 4 ulp each), on both sides of a chunk.
TEST(CpuRandom, NormalIsBoxMullerOfTheStreamsUniforms) {
  Backend& cpu = backend_for(kCpu);
  constexpr std::int64_t kCount = 1000;
  const Distribution d = Distribution::normal(-1.5, 3);
  kCpu.seed(8);
  const RandomStream at = *cpu.reserve_random(0);
  const std::vector<double> drawn =
      Tensor<1>::random({kCount}, d, kCpu, DType::F64).into_data().to_vec<double>();
  for (std::int64_t i = 0; i < kCount; ++i) {
    const std::uint64_t c = at.first + static_cast<std::uint64_t>(i);
    const long double u1 = 1.0L - cpu::uniform01(at.seed, 2 * c);
    const long double u2 = cpu::uniform01(at.seed, 2 * c + 1);
    const long double z =
        std::sqrt(-2.0L * std::log(u1)) * std::cos(2.0L * 3.14159265358979323846264L * u2);
    const double want = static_cast<double>(-1.5L + 3.0L * z);
    ASSERT_NEAR(drawn[static_cast<std::size_t>(i)], want, 1e-13 * (1 + std::fabs(want))) << i;
  }
}

}  // namespace
}  // namespace kiln
