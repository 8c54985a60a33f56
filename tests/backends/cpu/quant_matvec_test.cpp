// Quantized matrix-vector products against the float64 product of the dequantized weight, on
// every instruction set the CPU has, one and many threads' worth of rows, and empty shapes. The
// VNNI kernels encode x in int8 blocks, so their bound adds x's rounding: half a step of x's
// block scale times |W| (quant_matvec.h).
#include "backends/cpu/quant_matvec.h"

#include <gtest/gtest.h>
#include <kiln/data.h>
#include <kiln/quant.h>

#include <random>

namespace kiln::cpu {
namespace {

using Kind = QuantScheme::Kind;

std::vector<float> normal(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

class QuantMatvec : public ::testing::TestWithParam<std::tuple<Kind, QuantIsa>> {};

TEST_P(QuantMatvec, EqualsTheDequantizedProduct) {
  const auto [kind, isa] = GetParam();
  if (!cpu_has(isa)) GTEST_SKIP() << "this CPU lacks the instruction set";
  std::mt19937 rng(31);
  for (auto [rows, cols] :
       {std::pair<std::int64_t, std::int64_t>{1, 32}, {7, 96}, {300, 4096}, {0, 64}, {5, 0}}) {
    const TensorData w = TensorData::from_vec(normal(rows * cols, rng), Shape{rows, cols})
                             .quantize(quant_scheme(kind));
    const std::vector<float> x = normal(cols, rng);
    std::vector<float> y(rows, -1.0f);
    quantized_matvec(w, x, y, isa);
    const std::vector<float> dense = w.dequantize().to_vec<float>();
    std::vector<double> half_step(cols, 0.0);  // d_x / 2 of each value's block of 32
    if (isa == QuantIsa::Avx512) {
      for (std::int64_t b = 0; b < cols / 32; ++b) {
        double amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(double(x[b * 32 + j])));
        for (int j = 0; j < 32; ++j) half_step[b * 32 + j] = amax / 127 / 2;
      }
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      double want = 0, magnitude = 0, rounding = 0;
      for (std::int64_t k = 0; k < cols; ++k) {
        want += double(dense[r * cols + k]) * x[k];
        magnitude += std::fabs(double(dense[r * cols + k]) * x[k]);
        rounding += std::fabs(double(dense[r * cols + k])) * half_step[k];
      }
      EXPECT_NEAR(y[r], want, rounding * 1.001 + 1e-6 * magnitude + 1e-30)
          << rows << "x" << cols << " row " << r;
    }
  }
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<Kind, QuantIsa>>& info) {
  constexpr const char* kIsas[] = {"scalar", "avx2", "avx512"};
  return std::string(quant_kind_name(std::get<0>(info.param))) + "_" +
         kIsas[static_cast<int>(std::get<1>(info.param))];
}

INSTANTIATE_TEST_SUITE_P(KindsAndIsas, QuantMatvec,
                         ::testing::Combine(::testing::Values(Kind::Q8_0, Kind::Q4_0),
                                            ::testing::Values(QuantIsa::Scalar, QuantIsa::Avx2,
                                                              QuantIsa::Avx512)),
                         case_name);

TEST(QuantMatvecErrors, NamesWhatIsWrong) {
  const TensorData w =
      TensorData::from_vec(std::vector<float>(64), Shape{2, 32}).quantize(quant_scheme(Kind::Q8_0));
  std::vector<float> x(32), y(2), short_x(31);
  EXPECT_THROW(quantized_matvec(w, short_x, y), ShapeMismatch);
  EXPECT_THROW(quantized_matvec(w, x, std::span(y).first(1)), ShapeMismatch);
  const TensorData q41 =
      TensorData::from_vec(std::vector<float>(64), Shape{2, 32}).quantize(quant_scheme(Kind::Q4_1));
  EXPECT_THROW(quantized_matvec(q41, x, y), UnsupportedOperation);
  EXPECT_THROW(quantized_matvec(TensorData::from_vec(std::vector<float>(64), Shape{2, 32}), x, y),
               UnsupportedOperation);
  const TensorData w3 = TensorData::from_vec(std::vector<float>(64), Shape{1, 2, 32})
                            .quantize(quant_scheme(Kind::Q8_0));
  EXPECT_THROW(quantized_matvec(w3, x, y), ShapeMismatch);
  x[5] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(quantized_matvec(w, x, y), InvalidArgument);
}

}  // namespace
}  // namespace kiln::cpu
