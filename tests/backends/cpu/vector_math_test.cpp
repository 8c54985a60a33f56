// The CPU kernels that go through glibc's libmvec (src/backends/cpu/vector_math.h): gelu, sigmoid
// and silu on contiguous f32/f64 runs of every length around the vector width (against float64
// loops written here, with NaN and infinities), and softmax rows that hold an additive mask
// (-3.4e38), -inf, and scores 87 to 104 below the row's maximum, where libmvec's exp leaves its
// fast path and the result is subnormal or rounds to 0; attention's softmax rows through the same
// vector exp, with masked and causal keys.
#include "backends/cpu/vector_math.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/stream_store.h"
#include "support/spread.h"

namespace kiln::vector_math_test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double sigmoid(double v) { return 1 / (1 + std::exp(-v)); }
double gelu(double v) { return v == -kInf ? 0 : 0.5 * v * std::erfc(-v / std::sqrt(2.0)); }
double silu(double v) { return v == -kInf ? 0 : v * sigmoid(v); }

// values in [-12, 12), then NaN, +-inf, +-0 and the largest finite values of dtype.
std::vector<double> inputs(std::int64_t n, DType dtype, std::uint32_t seed) {
  std::vector<double> v = test::spread(n, seed, -12.0, 12.0);
  const double big =
      dtype == DType::F32 ? std::numeric_limits<float>::max() : std::numeric_limits<double>::max();
  const double specials[] = {std::nan(""), kInf, -kInf, 0.0, -0.0, big, -big};
  for (std::size_t k = 0; k < std::size(specials) && k < v.size(); ++k) {
    v[(k * 7 + 3) % v.size()] = specials[k];
  }
  return v;
}

TEST(CpuVectorActivations, EqualFloat64LoopsOnEveryRunLength) {
  struct Case {
    const char* name;
    Tensor<1> (*op)(const Tensor<1>&);
    double (*ref)(double);
  };
  const Case cases[] = {
      {"gelu", [](const Tensor<1>& x) { return activation::gelu(x); }, gelu},
      {"sigmoid", [](const Tensor<1>& x) { return activation::sigmoid(x); }, sigmoid},
      {"silu", [](const Tensor<1>& x) { return activation::silu(x); }, silu}};
  for (const Case& c : cases) {
    for (DType dtype : {DType::F32, DType::F64}) {
      // libmvec's unit is 4 (f64 AVX2) to 16 (f32 AVX-512) lanes; the kernel's chunk is 256.
      for (std::int64_t n : {1, 7, 8, 15, 16, 17, 33, 255, 256, 257, 1000, 70000}) {
        const std::vector<double> x = inputs(n, dtype, static_cast<std::uint32_t>(n));
        const TensorData data = TensorData::from_vec(x, Shape{n}).convert(dtype);
        const std::vector<double> stored = data.to_f64_vec();  // x as dtype holds it
        const std::vector<double> got =
            c.op(Tensor<1>::from_data(data, Device::cpu())).into_data().to_f64_vec();
        // libmvec is within 4 ulp; the formulas add a few roundings.
        const double tol = dtype == DType::F32 ? 4e-6 : 1e-13;
        for (std::int64_t i = 0; i < n; ++i) {
          const double want = c.ref(stored[static_cast<std::size_t>(i)]);
          const double g = got[static_cast<std::size_t>(i)];
          const std::string what = std::string(c.name) + " " + std::string(dtype_name(dtype)) +
                                   " n " + std::to_string(n) + " at " + std::to_string(i) + " of " +
                                   std::to_string(stored[static_cast<std::size_t>(i)]);
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(g)) << what << ": " << g;
          } else if (std::isinf(want)) {
            ASSERT_EQ(g, want) << what;
          } else {
            ASSERT_LE(std::abs(g - want), tol * std::max(1.0, std::abs(want))) << what << ": " << g;
          }
        }
      }
    }
  }
}

TEST(CpuVectorActivations, AStridedViewGivesTheContiguousResult) {
  const std::vector<double> x = inputs(2 * 300, DType::F32, 9);
  const Tensor<2> t = Tensor<2>::from_data(
      TensorData::from_vec(x, Shape{300, 2}).convert(DType::F32), Device::cpu());
  const Tensor<2> column = t.transpose();  // [2, 300], strided
  const std::vector<double> strided = activation::gelu(column).into_data().to_f64_vec();
  const std::vector<double> contiguous =
      activation::gelu(Tensor<2>::from_data(column.into_data(), Device::cpu()))
          .into_data()
          .to_f64_vec();
  ASSERT_EQ(strided.size(), contiguous.size());
  for (std::size_t i = 0; i < strided.size(); ++i) {
    if (std::isnan(contiguous[i])) {
      EXPECT_TRUE(std::isnan(strided[i])) << i;
    } else if (std::isinf(contiguous[i])) {
      EXPECT_EQ(strided[i], contiguous[i]) << i;
    } else {
      EXPECT_NEAR(strided[i], contiguous[i], 4e-6 * std::max(1.0, std::abs(contiguous[i]))) << i;
    }
  }
}

TEST(CpuSoftmax, MaskedRowsAreExactZerosAndSubnormalProbabilitiesKeepTheirValue) {
  // Rows of 37 f32 scores: a third masked by adding -3.4e38 (Hugging Face's mask), one -inf, and
  // scores 90, 95, 100, 103, 110 and 200 below the row's maximum.
  const std::int64_t rows = 64, n = 37;
  std::vector<float> x(static_cast<std::size_t>(rows * n));
  const std::vector<double> base = test::spread(rows * n, 5, -3.0, 3.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = x.data() + r * n;
    for (std::int64_t k = 0; k < n; ++k)
      row[k] = static_cast<float>(base[static_cast<std::size_t>(r * n + k)]);
    row[0] = 3.0f;  // the maximum
    const float below[] = {90, 95, 100, 103, 110, 200};
    for (std::size_t j = 0; j < std::size(below); ++j) row[1 + j] = 3.0f - below[j];
    row[8] = -std::numeric_limits<float>::infinity();
    for (std::int64_t k = 12; k < n; k += 3) row[k] += -3.4e38f;
  }
  const Tensor<2> t = Tensor<2>::from_data(TensorData::from_vec(x, Shape{rows, n}), Device::cpu());
  for (bool log : {false, true}) {
    const std::vector<double> got =
        (log ? activation::log_softmax(t, 1) : activation::softmax(t, 1)).into_data().to_f64_vec();
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* row = x.data() + r * n;
      double sum = 0;
      for (std::int64_t k = 0; k < n; ++k) sum += std::exp(static_cast<double>(row[k]) - 3.0);
      for (std::int64_t k = 0; k < n; ++k) {
        const double a = static_cast<double>(row[k]) - 3.0;
        const double g = got[static_cast<std::size_t>(r * n + k)];
        const std::string what = std::string(log ? "log_softmax" : "softmax") + " row " +
                                 std::to_string(r) + " element " + std::to_string(k);
        if (log) {
          const double want = a - std::log(sum);
          if (std::isinf(want)) {
            ASSERT_EQ(g, want) << what;
          } else {
            ASSERT_LE(std::abs(g - want), 1e-6 * std::max(1.0, std::abs(want))) << what;
          }
          continue;
        }
        const double want = std::exp(a) / sum;
        if (want < 0x1p-150) {
          ASSERT_EQ(g, 0.0) << what << " (rounds to 0 in f32)";
        } else if (want < 0x1p-126) {
          // Subnormal in f32: within two of its steps (2^-149) of the exact value.
          ASSERT_LE(std::abs(g - want), 0x1p-148) << what << ": " << g << " vs " << want;
          ASSERT_GT(g, 0.0) << what << " is subnormal, not 0";
        } else {
          ASSERT_LE(std::abs(g - want), 1e-6 * want) << what << ": " << g << " vs " << want;
        }
      }
    }
  }
}

TEST(CpuAttention, MaskedAndCausalRowsLongerThanAVectorEqualFloat64Loops) {
  // q, k, v [2, 3, 37, 16]; keys masked by padding (the last 9 of batch 1) and causally: each
  // row's softmax runs through the vector exp with excluded (-inf) lanes, a head per thread.
  const std::int64_t b = 2, h = 3, s = 37, d = 16;
  const Shape shape{b, h, s, d};
  const std::vector<double> qv = test::spread(b * h * s * d, 11, -1.5, 1.5);
  const std::vector<double> kv = test::spread(b * h * s * d, 12, -1.5, 1.5);
  const std::vector<double> vv = test::spread(b * h * s * d, 13, -1.5, 1.5);
  std::vector<std::uint8_t> padding(static_cast<std::size_t>(b * s), 0);
  for (std::int64_t j = s - 9; j < s; ++j) padding[static_cast<std::size_t>(s + j)] = 1;
  const Device cpu = Device::cpu();
  auto tensor = [&](const std::vector<double>& v) {
    return Tensor<4>::from_data(TensorData::from_vec(v, shape).convert(DType::F32), cpu);
  };
  const Tensor<4, Bool> mask = Tensor<4, Bool>::from_data(
      TensorData::from_vec(padding, Shape{b, 1, 1, s}).convert(DType::Bool), cpu);
  const std::vector<double> got =
      module::attention(tensor(qv), tensor(kv), tensor(vv), module::AttentionMask<4>::exclude(mask),
                        std::nullopt, {.scale = std::nullopt, .is_causal = true})
          .into_data()
          .to_f64_vec();
  const auto f32 = [](double x) { return static_cast<double>(static_cast<float>(x)); };
  const double scale = 1 / std::sqrt(static_cast<double>(d));
  for (std::int64_t bh = 0; bh < b * h; ++bh) {
    const std::int64_t batch = bh / h;
    const std::size_t base = static_cast<std::size_t>(bh * s * d);
    for (std::int64_t i = 0; i < s; ++i) {
      std::vector<double> w(static_cast<std::size_t>(s), 0.0);
      double top = -kInf, sum = 0;
      for (std::int64_t j = 0; j <= i; ++j) {
        if (padding[static_cast<std::size_t>(batch * s + j)] != 0) continue;
        double dot = 0;
        for (std::int64_t c = 0; c < d; ++c) {
          dot += f32(qv[base + static_cast<std::size_t>(i * d + c)]) *
                 f32(kv[base + static_cast<std::size_t>(j * d + c)]);
        }
        w[static_cast<std::size_t>(j)] = dot * scale;
        top = std::max(top, dot * scale);
      }
      for (std::int64_t j = 0; j <= i; ++j) {
        if (padding[static_cast<std::size_t>(batch * s + j)] != 0) continue;
        w[static_cast<std::size_t>(j)] = std::exp(w[static_cast<std::size_t>(j)] - top);
        sum += w[static_cast<std::size_t>(j)];
      }
      for (std::int64_t c = 0; c < d; ++c) {
        double want = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          if (padding[static_cast<std::size_t>(batch * s + j)] != 0) continue;
          want += w[static_cast<std::size_t>(j)] / sum *
                  f32(vv[base + static_cast<std::size_t>(j * d + c)]);
        }
        const double g = got[base + static_cast<std::size_t>(i * d + c)];
        ASSERT_NEAR(g, want, 2e-6) << "batch-head " << bh << " row " << i << " column " << c;
      }
    }
  }
}

}  // namespace
}  // namespace kiln::vector_math_test

namespace kiln::cpu {
namespace {

// vector_exp_sum: the sum equals float64's sum of the exponentials of the shifted inputs (each
// rounded to float, as stored), whether the exponentials are written out or not (log_softmax
// asks for the sum alone), on every run length around the vector widths, with -inf and very
// negative inputs that underflow.
TEST(CpuVectorExpSum, TheSumWithAndWithoutTheExponentials) {
  for (const std::int64_t n : {1, 7, 8, 15, 16, 17, 31, 33, 128, 257, 300}) {
    std::vector<float> in(static_cast<std::size_t>(n));
    const auto values = test::spread(n, static_cast<std::uint32_t>(n), -30.0, 0.0);
    for (std::int64_t i = 0; i < n; ++i) in[i] = static_cast<float>(values[i]);
    in[0] = -std::numeric_limits<float>::infinity();
    if (n > 2) in[2] = -3.4e38f;
    std::vector<float> out(in.size());
    double with = 0, without = 0, fetching = 0;
    if (!vector_exp_sum(in.data(), 0.0f, out.data(), n, with)) GTEST_SKIP() << "no vector exp";
    ASSERT_TRUE(vector_exp_sum(in.data(), 0.0f, nullptr, n, without));
    EXPECT_EQ(with, without) << n;
    // Fetching the next row's lines (a hint, here the same row) changes nothing.
    std::vector<float> fetched(in.size());
    ASSERT_TRUE(vector_exp_sum(in.data(), 0.0f, fetched.data(), n, fetching, in.data()));
    EXPECT_EQ(fetching, with) << n;
    EXPECT_EQ(fetched, out) << n;
    double want = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      want += static_cast<double>(static_cast<float>(std::exp(static_cast<double>(in[i]))));
      EXPECT_NEAR(out[i], std::exp(static_cast<double>(in[i])),
                  2e-7 * std::exp(static_cast<double>(in[i])) + 1e-45)
          << n << " [" << i << "]";
    }
    EXPECT_NEAR(with, want, 1e-6 * want) << n;
  }
}

// Arguments down through the subnormal results (-87 to -104, each result against float64's, to
// the least subnormal), rows longer than one block of float lanes, and a NaN: NaN there and in
// the sum, its neighbours' values unchanged.
TEST(CpuVectorExpSum, SubnormalResultsLongRowsAndNaN) {
  for (const std::int64_t n : {9, 200, 1000}) {
    const auto values = test::spread(n, static_cast<std::uint32_t>(n + 7), -110.0, 0.0);
    std::vector<float> in(static_cast<std::size_t>(n)), out(in.size());
    for (std::int64_t i = 0; i < n; ++i) in[i] = static_cast<float>(values[i]);
    double sum = 0;
    if (!vector_exp_sum(in.data(), 0.0f, out.data(), n, sum)) GTEST_SKIP() << "no vector exp";
    double want = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double e = std::exp(static_cast<double>(in[i]));
      want += static_cast<double>(static_cast<float>(e));
      EXPECT_NEAR(out[i], e, 2e-7 * e + 1.5e-45) << n << " [" << i << "] x " << in[i];
    }
    EXPECT_NEAR(sum, want, 1e-6 * want) << n;
    std::vector<float> with_nan = in, nan_out(in.size());
    with_nan[3] = std::numeric_limits<float>::quiet_NaN();
    ASSERT_TRUE(vector_exp_sum(with_nan.data(), 0.0f, nan_out.data(), n, sum));
    EXPECT_TRUE(std::isnan(nan_out[3])) << n;
    EXPECT_TRUE(std::isnan(sum)) << n;
    for (std::int64_t i = 0; i < n; ++i) {
      if (i != 3) EXPECT_EQ(nan_out[i], out[i]) << n << " [" << i << "]";
    }
  }
}

}  // namespace
}  // namespace kiln::cpu

namespace kiln::cpu {
namespace {

// fill_where and lanes_max (attention's masking pass) equal their scalar loops on every run
// length around a vector, in float and double; NaN never becomes the maximum.
template <class C>
void expect_fill_and_max_equal_loops() {
  for (const std::int64_t n : {0, 1, 7, 8, 15, 16, 17, 31, 33, 64, 100}) {
    const auto values = test::spread(n, static_cast<std::uint32_t>(n + 40), -5.0, 5.0);
    std::vector<C> v(static_cast<std::size_t>(n)), want(v.size());
    bool mask[128] = {};
    for (std::int64_t i = 0; i < n; ++i) {
      v[i] = static_cast<C>(values[i]);
      mask[i] = (i * 7 + n) % 3 == 0;
      want[i] = mask[i] ? C(-1e30) : v[i];
    }
    if (n > 3) v[3] = want[3] = std::numeric_limits<C>::quiet_NaN(), mask[3] = false;
    fill_where(v.data(), mask, n, C(-1e30));
    C top = -std::numeric_limits<C>::infinity();
    for (std::int64_t i = 0; i < n; ++i) {
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(v[i])) << n << " [" << i << "]";
      } else {
        EXPECT_EQ(v[i], want[i]) << n << " [" << i << "]";
        top = std::max(top, want[i]);
      }
    }
    EXPECT_EQ(lanes_max(v.data(), n), top) << n;
  }
}

TEST(CpuVectorMasks, FillWhereAndLanesMaxEqualTheirLoops) {
  expect_fill_and_max_equal_loops<float>();
  expect_fill_and_max_equal_loops<double>();
}

// The streamed copies equal plain loops for every length around a vector and every start
// within a line, in the destination (aligned stores past an unaligned head) and the source.
TEST(CpuStreamStore, CopiesAndScaledCopiesEqualTheirLoops) {
  const auto values = test::spread(200, 61, -3.0, 3.0);
  std::vector<float> src(values.begin(), values.end());
  alignas(64) float dst[256];
  for (const std::int64_t n : {0, 1, 15, 16, 17, 31, 32, 33, 100, 150}) {
    for (const std::int64_t to : {0, 1, 5, 15}) {
      for (const std::int64_t from : {0, 3}) {
        std::fill(std::begin(dst), std::end(dst), -7.0f);
        stream_scaled_unfenced(dst + to, src.data() + from, 0.37f, n);
        stream_fence();
        for (std::int64_t i = 0; i < 256; ++i) {
          const float want = i >= to && i < to + n ? src[i - to + from] * 0.37f : -7.0f;
          ASSERT_EQ(dst[i], want) << "scaled n " << n << " to " << to << " from " << from;
        }
        std::fill(std::begin(dst), std::end(dst), -7.0f);
        stream_bytes_unfenced(dst + to, src.data() + from, n * 4);
        stream_fence();
        for (std::int64_t i = 0; i < 256; ++i) {
          const float want = i >= to && i < to + n ? src[i - to + from] : -7.0f;
          ASSERT_EQ(dst[i], want) << "copy n " << n << " to " << to << " from " << from;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln::cpu
