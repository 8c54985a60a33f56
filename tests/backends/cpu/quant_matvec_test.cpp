// Products with quantized weights against the float64 product of the dequantized weight, on
// every instruction set the CPU has: one row of x and batches that cross the kernels' groups of
// four and passes of 64 rows, one and many threads' worth of weight rows, every scheme (the GGUF
// kinds on their blocks, Q8_K and the Scalar set on decoded tiles), rows of x with NaN or
// infinity, and empty shapes. The AVX2 and VNNI kernels encode x in int8 blocks, so their bound
// adds x's rounding: half a step of x's block scale times |W| (quant_matvec.h).
#include "backends/cpu/quant_matvec.h"

#include <gtest/gtest.h>
#include <kiln/data.h>
#include <kiln/quant.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backends/cpu/quant_kernels.h"
#include "quant/block_reference.h"
#include "quant/kernels.h"

namespace kiln::cpu {
namespace {

using Kind = QuantScheme::Kind;

std::vector<float> normal(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The bound on |got - want| of one product: x's int8 rounding on VNNI (Q8_0 and Q4_0), float
// rounding otherwise.
struct Reference {
  double want = 0;
  double bound = 0;
};

Reference reference(const std::vector<float>& dense, const float* x, std::int64_t r,
                    std::int64_t cols, bool int8_x) {
  Reference out;
  double magnitude = 0;
  for (std::int64_t b = 0; b < cols / 32; ++b) {
    double amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(double(x[b * 32 + j])));
    for (int j = 0; j < 32; ++j) {
      const std::int64_t k = b * 32 + j;
      const double w = dense[static_cast<std::size_t>(r * cols + k)];
      out.want += w * x[k];
      magnitude += std::fabs(w * x[k]);
      if (int8_x) out.bound += std::fabs(w) * amax / 127 / 2;
    }
  }
  out.bound = out.bound * 1.001 + 1e-5 * magnitude + 1e-30;
  return out;
}

class QuantProduct : public ::testing::TestWithParam<std::tuple<Kind, QuantIsa>> {};

TEST_P(QuantProduct, EqualsTheDequantizedProduct) {
  const auto [kind, isa] = GetParam();
  if (!cpu_has(isa)) GTEST_SKIP() << "this CPU lacks the instruction set";
  const bool int8_x = rounds_x_to_int8(kind, isa);
  // With AVX2 or VNNI every GGUF kind of weights (Q8_K is llama.cpp's kind for activations).
  EXPECT_EQ(int8_x, isa != QuantIsa::Scalar && kind != Kind::Q8_K);
  const QuantScheme scheme = quant_scheme(kind);
  const std::int64_t unit = scheme.block_size;
  std::mt19937 rng(31);
  for (auto [rows, cols, batch] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 1, 1},
                                   {7, 3, 1},
                                   {300, 16, 1},
                                   {5, 2, 3},
                                   {9, 4, 4},
                                   {33, 3, 70},
                                   {6, 11, 5},  // a group of eight blocks and a partial one
                                   {3, 19, 9},
                                   {0, 2, 3},
                                   {5, 0, 2},
                                   {4, 2, 0}}) {
    cols *= unit;
    // Kinds kiln only decodes: random blocks (finite scales).
    const TensorData w =
        can_quantize(scheme)
            ? TensorData::from_vec(normal(rows * cols, rng), Shape{rows, cols}).quantize(scheme)
            : TensorData::quantized(
                  quant_testing::random_blocks(kind, static_cast<int>(rows * cols / unit), rng),
                  Shape{rows, cols}, scheme);
    std::vector<float> x = normal(cols * batch, rng);
    std::vector<float> y(rows * batch, -1.0f);
    quantized_matmul({scheme, w.bytes().data(), rows, cols}, x.data(), batch, y.data(), isa);
    const std::vector<float> dense = w.dequantize().to_vec<float>();
    for (std::int64_t m = 0; m < batch; ++m) {
      for (std::int64_t r = 0; r < rows; ++r) {
        const Reference ref = reference(dense, x.data() + m * cols, r, cols, int8_x);
        ASSERT_NEAR(y[m * rows + r], ref.want, ref.bound)
            << rows << "x" << cols << " batch " << batch << " row " << m << ", " << r;
      }
    }
  }
}

// Blocks of random bytes (every code a block can hold, Q8_0's -128 among them; finite scales)
// against x whose int8 codes are all +-127: the byte products at their largest, where AVX2's
// int16 sums of product pairs would saturate if a kernel let them.
TEST_P(QuantProduct, ExtremeCodesDoNotSaturate) {
  const auto [kind, isa] = GetParam();
  if (!cpu_has(isa)) GTEST_SKIP() << "this CPU lacks the instruction set";
  const QuantScheme scheme = quant_scheme(kind);
  const std::int64_t unit = scheme.block_size;
  const std::int64_t rows = 5, cols = (unit == 32 ? 11 : 2) * unit, batch = 5;
  std::mt19937 rng(35);
  const TensorData w = TensorData::quantized(
      quant_testing::random_blocks(kind, static_cast<int>(rows * cols / unit), rng),
      Shape{rows, cols}, scheme);
  std::vector<float> x(static_cast<std::size_t>(cols * batch));
  for (float& v : x) v = rng() % 2 == 0 ? 1.0f : -1.0f;
  std::vector<float> y(static_cast<std::size_t>(rows * batch));
  quantized_matmul({scheme, w.bytes().data(), rows, cols}, x.data(), batch, y.data(), isa);
  const std::vector<float> dense = w.dequantize().to_vec<float>();
  const bool int8_x = rounds_x_to_int8(kind, isa);
  for (std::int64_t m = 0; m < batch; ++m) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const Reference ref = reference(dense, x.data() + m * cols, r, cols, int8_x);
      ASSERT_NEAR(y[m * rows + r], ref.want, ref.bound) << "row " << m << ", " << r;
    }
  }
}

// A row of x with NaN or infinity has no int8 code: it is multiplied in float, NaN and
// infinities propagating as in the float product; the other rows are unaffected.
TEST_P(QuantProduct, NonFiniteRowsPropagate) {
  const auto [kind, isa] = GetParam();
  if (!cpu_has(isa)) GTEST_SKIP() << "this CPU lacks the instruction set";
  const QuantScheme scheme = quant_scheme(kind);
  if (!can_quantize(scheme)) GTEST_SKIP() << "kiln does not encode this kind (positive weights)";
  const std::int64_t rows = 6, cols = 2 * scheme.block_size, batch = 6;
  std::mt19937 rng(32);
  // Positive weights, so that an infinite x gives an infinite product of its sign.
  std::vector<float> values = normal(rows * cols, rng);
  for (float& v : values) v = std::fabs(v) + 0.5f;
  const TensorData w = TensorData::from_vec(values, Shape{rows, cols}).quantize(scheme);
  std::vector<float> x(cols * batch, 1.0f);
  x[1 * cols + 3] = std::nanf("");
  x[3 * cols + 0] = INFINITY;
  x[4 * cols + 5] = -INFINITY;
  std::vector<float> y(rows * batch);
  quantized_matmul({scheme, w.bytes().data(), rows, cols}, x.data(), batch, y.data(), isa);
  for (std::int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(std::isnan(y[1 * rows + r])) << r;
    EXPECT_EQ(y[3 * rows + r], INFINITY) << r;
    EXPECT_EQ(y[4 * rows + r], -INFINITY) << r;
    for (std::int64_t m : {0, 2, 5}) EXPECT_TRUE(std::isfinite(y[m * rows + r])) << m << ", " << r;
  }
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<Kind, QuantIsa>>& info) {
  constexpr const char* kIsas[] = {"scalar", "avx2", "avx512"};
  return std::string(quant_kind_name(std::get<0>(info.param))) + "_" +
         kIsas[static_cast<int>(std::get<1>(info.param))];
}

INSTANTIATE_TEST_SUITE_P(
    KindsAndIsas, QuantProduct,
    ::testing::Combine(::testing::Values(Kind::Q8_0, Kind::Q4_0, Kind::Q4_1, Kind::Q5_0, Kind::Q5_1,
                                         Kind::Q2_K, Kind::Q3_K, Kind::Q4_K, Kind::Q5_K, Kind::Q6_K,
                                         Kind::Q8_K),
                       ::testing::Values(QuantIsa::Scalar, QuantIsa::Avx2, QuantIsa::Avx512)),
    case_name);

TEST(QuantMatvec, IsTheProductOfOneRow) {
  std::mt19937 rng(33);
  const TensorData w =
      TensorData::from_vec(normal(3 * 64, rng), Shape{3, 64}).quantize(quant_scheme(Kind::Q5_1));
  const std::vector<float> x = normal(64, rng);
  std::vector<float> y(3), want(3);
  quantized_matvec(w, x, y);
  quantized_matmul({w.scheme(), w.bytes().data(), 3, 64}, x.data(), 1, want.data());
  EXPECT_EQ(y, want);
}

// The int8 kernels' encoding of x is kiln's int8 blocks (quant::quantize_int8), code for code,
// with each instruction set's encoder: halves round away from zero (x = k + 1/2 with scale 1),
// zero blocks, tiny blocks, and a partial last group.
class QuantMatvecEncoding : public ::testing::TestWithParam<QuantIsa> {};

TEST_P(QuantMatvecEncoding, IsKilnsInt8Blocks) {
  const QuantIsa isa = GetParam();
  if (!cpu_has(isa)) GTEST_SKIP() << "this CPU lacks the instruction set";
  std::mt19937 rng(34);
  const std::int64_t blocks = 13;
  std::vector<float> x = normal(blocks * 32, rng);
  for (int j = 0; j < 32; ++j) x[j] = j == 0 ? 127.0f : static_cast<float>(j % 9) - 4.5f;
  for (int j = 0; j < 32; ++j) x[2 * 32 + j] = 0.0f;
  for (int j = 0; j < 32; ++j) x[3 * 32 + j] *= 1e-30f;
  std::vector<std::byte> encoded(static_cast<std::size_t>(encoded_row_bytes(blocks)));
  encode_row(x.data(), blocks, encoded.data(), isa);
  std::vector<std::byte> want(static_cast<std::size_t>(blocks * 36));
  quant::quantize_int8(x.data(), blocks, 32, want.data());
  for (std::int64_t b = 0; b < blocks; ++b) {
    const EncodedBlock got = encoded_block(encoded.data(), b);
    float scale;
    std::memcpy(&scale, want.data() + b * 36, 4);
    EXPECT_EQ(got.scale, scale) << "block " << b;
    std::int32_t sum = 0;
    for (int j = 0; j < 32; ++j) {
      const auto code = static_cast<std::int8_t>(want[static_cast<std::size_t>(b * 36 + 4 + j)]);
      EXPECT_EQ(got.codes[j], code) << "block " << b << " value " << j;
      sum += code;
    }
    EXPECT_EQ(got.sum, sum) << "block " << b;
  }
  EXPECT_EQ(encoded_block(encoded.data(), 0).codes[1], -4);  // -3.5 rounds to -4
  EXPECT_EQ(encoded_block(encoded.data(), 0).codes[5], 1);   // 0.5 rounds to 1
}

INSTANTIATE_TEST_SUITE_P(Isas, QuantMatvecEncoding,
                         ::testing::Values(QuantIsa::Avx2, QuantIsa::Avx512),
                         [](const ::testing::TestParamInfo<QuantIsa>& info) {
                           return info.param == QuantIsa::Avx2 ? "avx2" : "avx512";
                         });

TEST(QuantMatvecErrors, NamesWhatIsWrong) {
  const TensorData w =
      TensorData::from_vec(std::vector<float>(64), Shape{2, 32}).quantize(quant_scheme(Kind::Q8_0));
  std::vector<float> x(32), y(2), short_x(31);
  EXPECT_THROW(quantized_matvec(w, short_x, y), ShapeMismatch);
  EXPECT_THROW(quantized_matvec(w, x, std::span(y).first(1)), ShapeMismatch);
  EXPECT_THROW(quantized_matvec(TensorData::from_vec(std::vector<float>(64), Shape{2, 32}), x, y),
               DTypeMismatch);
  const TensorData w3 = TensorData::from_vec(std::vector<float>(64), Shape{1, 2, 32})
                            .quantize(quant_scheme(Kind::Q8_0));
  EXPECT_THROW(quantized_matvec(w3, x, y), ShapeMismatch);
  x[5] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(quantized_matvec(w, x, y), InvalidArgument);
}

}  // namespace
}  // namespace kiln::cpu
