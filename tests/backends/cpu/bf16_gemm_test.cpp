// bf16 products on oneDNN (bf16_gemm.h) and the matmul and linear ops that use them: against
// float64 products of the same bf16 values, over strided, transposed, batched and broadcast
// operands, large enough to be cut into blocks over the threads; layouts oneDNN cannot read
// are declined with nothing written.
#include "backends/cpu/bf16_gemm.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <vector>

#include "support/spread.h"

namespace kiln {
namespace {

const Device kCpu = Device::cpu();

template <std::size_t D>
Tensor<D> bf16_tensor(std::vector<std::int64_t> shape, std::uint32_t seed) {
  const Shape s(shape);
  return Tensor<D>::from_data(
      TensorData::from_vec(test::spread(s.num_elements(), seed, -1.0, 1.0), s).convert(DType::BF16),
      kCpu);
}

// |got - want| within bf16's rounding of the result plus f32 accumulation, relative to the sum
// of the magnitudes of the products.
void expect_product(const std::vector<double>& got, const std::vector<double>& want,
                    const std::vector<double>& magnitude, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::abs(got[i] - want[i]), std::abs(want[i]) / 128 + 1e-5 * magnitude[i] + 1e-30)
        << what << " [" << i << "]: got " << got[i] << ", want " << want[i];
  }
}

// a [.., m, k] @ b [.., k, n] in float64 with broadcast batch dims of a common rank.
void reference(const Tensor<3>& a, const Tensor<3>& b, std::vector<double>& out,
               std::vector<double>& magnitude) {
  const auto av = a.into_data().to_f64_vec(), bv = b.into_data().to_f64_vec();
  const std::int64_t batch = std::max(a.shape()[0], b.shape()[0]);
  const std::int64_t m = a.shape()[1], k = a.shape()[2], n = b.shape()[2];
  out.assign(static_cast<std::size_t>(batch * m * n), 0.0);
  magnitude = out;
  for (std::int64_t t = 0; t < batch; ++t) {
    const std::int64_t ta = a.shape()[0] == 1 ? 0 : t, tb = b.shape()[0] == 1 ? 0 : t;
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j)
        for (std::int64_t p = 0; p < k; ++p) {
          const double x = av[(ta * m + i) * k + p] * bv[(tb * k + p) * n + j];
          out[(t * m + i) * n + j] += x;
          magnitude[(t * m + i) * n + j] += std::abs(x);
        }
  }
}

void expect_matmul(const Tensor<3>& a, const Tensor<3>& b, const std::string& what) {
  std::vector<double> want, magnitude;
  reference(a, b, want, magnitude);
  const auto c = a.matmul(b);
  ASSERT_EQ(c.dtype(), DType::BF16);
  expect_product(c.into_data().to_f64_vec(), want, magnitude, what);
}

TEST(Bf16Gemm, MatmulMatchesFloat64OverLayouts) {
  // Folded batch against one shared matrix, large enough for blocks over the threads.
  expect_matmul(bf16_tensor<3>({3, 150, 64}, 1), bf16_tensor<3>({1, 64, 96}, 2), "folded");
  // Per-matrix products, broadcast batch.
  expect_matmul(bf16_tensor<3>({4, 33, 17}, 3), bf16_tensor<3>({4, 17, 29}, 4), "batched");
  expect_matmul(bf16_tensor<3>({1, 33, 17}, 5), bf16_tensor<3>({5, 17, 29}, 6), "broadcast");
  // Transposed views (read through their strides) and a sliced one.
  expect_matmul(bf16_tensor<3>({2, 40, 300}, 7).swap_dims(1, 2),
                bf16_tensor<3>({2, 70, 40}, 8).swap_dims(1, 2), "transposed");
  expect_matmul(bf16_tensor<3>({2, 50, 80}, 9).slice({{0, 2}, {0, 50}, {0, 80, 2}}),
                bf16_tensor<3>({2, 40, 30}, 10), "strided columns");
  // One row, one column, and K = 1.
  expect_matmul(bf16_tensor<3>({1, 1, 64}, 11), bf16_tensor<3>({1, 64, 1}, 12), "dot");
  expect_matmul(bf16_tensor<3>({1, 9, 1}, 13), bf16_tensor<3>({1, 1, 7}, 14), "outer");
}

TEST(Bf16Gemm, LinearAddsTheBiasBeforeRounding) {
  const auto x = bf16_tensor<3>({2, 120, 96}, 21);
  const auto w = bf16_tensor<2>({80, 96}, 22);  // [out, in]
  const auto bias = bf16_tensor<1>({80}, 23);
  const auto y = module::linear(x, w, bias);
  ASSERT_EQ(y.dtype(), DType::BF16);
  const auto xv = x.into_data().to_f64_vec(), wv = w.into_data().to_f64_vec(),
             bv = bias.into_data().to_f64_vec(), got = y.into_data().to_f64_vec();
  std::vector<double> want(got.size()), magnitude(got.size());
  for (std::int64_t r = 0; r < 240; ++r)
    for (std::int64_t o = 0; o < 80; ++o) {
      double sum = bv[o], mag = std::abs(bv[o]);
      for (std::int64_t i = 0; i < 96; ++i) {
        sum += xv[r * 96 + i] * wv[o * 96 + i];
        mag += std::abs(xv[r * 96 + i] * wv[o * 96 + i]);
      }
      want[r * 80 + o] = sum;
      magnitude[r * 80 + o] = mag;
    }
  expect_product(got, want, magnitude, "linear");
  // A bias view with gaps takes the f32 path, with the same result.
  const auto spaced = bf16_tensor<1>({160}, 23).slice({{0, 160, 2}});
  EXPECT_EQ(module::linear(x, w, spaced).shape(), y.shape());
}

TEST(Bf16Gemm, DeclinesWhatOneDnnCannotReadAndWritesNothing) {
  std::vector<bfloat16> a(64 * 64, bfloat16(1.0f)), b(64 * 64, bfloat16(1.0f));
  std::vector<bfloat16> c(16 * 16, bfloat16(-7.0f));
  // Neither stride of a is 1.
  EXPECT_FALSE(cpu::bf16_gemm({a.data(), 16, 16, 64, 2}, {b.data(), 16, 16, 16, 1}, c.data(), 16));
  // A broadcast (stride 0) operand.
  EXPECT_FALSE(cpu::bf16_gemm({a.data(), 16, 16, 0, 1}, {b.data(), 16, 16, 16, 1}, c.data(), 16));
  for (bfloat16 v : c) EXPECT_EQ(static_cast<float>(v), -7.0f);
  // A readable layout is taken where the CPU has bf16 instructions and kiln has oneDNN.
  if (cpu::bf16_gemm({a.data(), 16, 16, 16, 1}, {b.data(), 16, 16, 16, 1}, c.data(), 16)) {
    for (bfloat16 v : c) EXPECT_EQ(static_cast<float>(v), 16.0f);
  }
}

}  // namespace
}  // namespace kiln
