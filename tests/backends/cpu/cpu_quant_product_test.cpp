// matmul, linear and embedding with a QFloat weight on the CPU (cpu_quant_product.cpp), through
// the tensor API as a model calls them, against float64 products of the dequantized weight:
// every float dtype of x, non-contiguous and 3-D inputs, batches of one to many rows, a bias,
// both layouts of the weight, the fused and autodiff chains, rows of x with NaN, lookups, and
// the memory a product takes (the weight is never decoded whole).
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/module_ops.h>
#include <kiln/quant.h>

#include <cmath>
#include <random>

#include "backends/cpu/quant_matvec.h"
#include "support/error_message.h"

namespace kiln {
namespace {

using Kind = QuantScheme::Kind;

std::vector<float> normal(std::int64_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// Values of x as float64, for any dtype (TensorData converts).
std::vector<double> values_of(const TensorData& data) { return data.to_f64_vec(); }

// y[m, n] = sum_k x[m, k] W[n, k] (+ bias[n]) in float64 over the dequantized weight [N, K], with
// the bound of one product: x's int8 rounding where the VNNI kernels encode x (Q8_0, Q4_0),
// float rounding, and the rounding of x's and y's dtype.
struct Expected {
  std::vector<double> values;
  std::vector<double> bounds;
};

Expected expected(const std::vector<double>& x, std::int64_t rows, const TensorData& w,
                  const std::vector<double>& bias, DType dtype) {
  const std::int64_t n = w.shape()[0], k = w.shape()[1];
  const std::vector<double> dense = w.dequantize().to_f64_vec();
  const bool int8_x = cpu::rounds_x_to_int8(w.scheme().kind);
  const double eps = dtype == DType::BF16 ? 1.0 / 128 : dtype == DType::F16 ? 1.0 / 1024 : 1e-6;
  Expected out;
  for (std::int64_t m = 0; m < rows; ++m) {
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = bias.empty() ? 0.0 : bias[static_cast<std::size_t>(j)];
      double magnitude = std::fabs(sum), rounding = 0;
      for (std::int64_t b = 0; b < k / 32; ++b) {
        double amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[m * k + b * 32 + i]));
        for (int i = 0; i < 32; ++i) {
          const double xv = x[m * k + b * 32 + i], wv = dense[j * k + b * 32 + i];
          sum += xv * wv;
          magnitude += std::fabs(xv * wv);
          if (int8_x) rounding += std::fabs(wv) * amax / 254;
        }
      }
      out.values.push_back(sum);
      out.bounds.push_back(rounding * 1.001 + 1e-5 * magnitude + eps * std::fabs(sum) + 1e-12);
    }
  }
  return out;
}

// x [batch, rows, k] @ w [batch, k, n] in float64, both row-major.
std::vector<double> product(const std::vector<double>& x, const std::vector<double>& w,
                            std::int64_t batch, std::int64_t rows, std::int64_t k, std::int64_t n) {
  std::vector<double> out(static_cast<std::size_t>(batch * rows * n));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t m = 0; m < rows; ++m) {
      for (std::int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (std::int64_t p = 0; p < k; ++p)
          sum += x[(b * rows + m) * k + p] * w[(b * k + p) * n + j];
        out[static_cast<std::size_t>((b * rows + m) * n + j)] = sum;
      }
    }
  }
  return out;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want,
                     const std::string& context) {
  ASSERT_EQ(got.size(), want.size()) << context;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << context << " at " << i;
  }
}

void expect_within(const TensorData& got, const Expected& want, const std::string& context) {
  const std::vector<double> values = got.to_f64_vec();
  ASSERT_EQ(values.size(), want.values.size()) << context;
  for (std::size_t i = 0; i < values.size(); ++i) {
    ASSERT_NEAR(values[i], want.values[i], want.bounds[i]) << context << " at " << i;
  }
}

std::vector<Device> devices() {
  const Device cpu = Device::cpu();
  return {cpu, cpu.fused(), cpu.autodiff()};
}

TEST(QuantizedProduct, LinearOverDTypesLayoutsBatchesAndSchemes) {
  const std::int64_t k = 64, n = 24;
  for (const QuantScheme& scheme : {quant_scheme(Kind::Q8_0), quant_scheme(Kind::Q4_0),
                                    quant_scheme(Kind::Q4_1), int8_channel_scheme()}) {
    const TensorData w = TensorData::from_vec(normal(n * k, 40), Shape{n, k}).quantize(scheme);
    const std::vector<float> bias_values = normal(n, 41);
    for (const Device& device : devices()) {
      const auto q = Tensor<2>::from_data(w, device);
      for (DType dtype : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
        for (std::int64_t rows : {1, 4, 70}) {
          const std::string context =
              device.to_string() + " " + std::string(quant_kind_name(scheme.kind)) + " " +
              std::string(dtype_name(dtype)) + " rows " + std::to_string(rows);
          const auto x =
              Tensor<2>::from_data(TensorData::from_vec(normal(rows * k, 42), {rows, k}), device)
                  .cast(dtype);
          const auto bias =
              Tensor<1>::from_data(TensorData::from_vec(bias_values), device).cast(dtype);
          const std::vector<double> xv = values_of(x.into_data());
          const TensorData y = module::linear(x, q, bias).into_data();
          EXPECT_EQ(y.dtype(), dtype) << context;
          EXPECT_EQ(y.shape(), (Shape{rows, n})) << context;
          expect_within(y, expected(xv, rows, w, values_of(bias.into_data()), dtype), context);
          // Without a bias, as matmul with the weight's transpose.
          expect_within(x.matmul(q.transpose()).into_data(), expected(xv, rows, w, {}, dtype),
                        context + " matmul");
        }
      }
    }
  }
}

TEST(QuantizedProduct, ThreeDimensionalAndStridedInputs) {
  const std::int64_t k = 96, n = 8;
  const TensorData w =
      TensorData::from_vec(normal(n * k, 43), Shape{n, k}).quantize(quant_scheme(Kind::Q8_0));
  for (const Device& device : devices()) {
    const auto q = Tensor<2>::from_data(w, device);
    // x [2, 3, k] as a transposed view of [k, 3, 2] (no dim contiguous along k).
    const auto base =
        Tensor<3>::from_data(TensorData::from_vec(normal(k * 6, 44), {k, 3, 2}), device);
    const auto x = base.permute({2, 1, 0});
    const std::vector<double> xv = values_of(x.into_data());
    const Expected want = expected(xv, 6, w, {}, DType::F32);
    const TensorData y = module::linear(x, q, std::nullopt).into_data();
    EXPECT_EQ(y.shape(), (Shape{2, 3, n}));
    expect_within(y, want, device.to_string() + " linear");
    // matmul of a strided 2-D x: [6, k] as the transpose of [k, 6].
    const auto columns =
        Tensor<2>::from_data(TensorData::from_vec(normal(k * 6, 45), {k, 6}), device);
    const auto x2 = columns.transpose();
    expect_within(x2.matmul(q.transpose()).into_data(),
                  expected(values_of(x2.into_data()), 6, w, {}, DType::F32),
                  device.to_string() + " matmul");
  }
}

// The weight in its stored order as the right operand ([k, n], blocks along n), and a batch of
// quantized matrices: not the layout the kernels read, still the dequantized product.
TEST(QuantizedProduct, OtherLayoutsOfTheWeight) {
  const std::int64_t k = 5, n = 64, rows = 3;
  const TensorData w =
      TensorData::from_vec(normal(k * n, 45), Shape{k, n}).quantize(quant_scheme(Kind::Q4_0));
  const std::vector<double> dense = w.dequantize().to_f64_vec();
  const std::vector<float> xv = normal(rows * k, 46);
  for (const Device& device : devices()) {
    const auto x = Tensor<2>::from_data(TensorData::from_vec(xv, {rows, k}), device);
    expect_near_all(x.matmul(Tensor<2>::from_data(w, device)).into_data().to_f64_vec(),
                    product({xv.begin(), xv.end()}, dense, 1, rows, k, n),
                    device.to_string() + " stored order");
    // [2, k, n] quantized, a batch of weights.
    const TensorData batch = TensorData::from_vec(normal(2 * k * n, 47), Shape{2, k, n})
                                 .quantize(quant_scheme(Kind::Q8_0));
    const auto x3 =
        Tensor<3>::from_data(TensorData::from_vec(normal(2 * rows * k, 48), {2, rows, k}), device);
    expect_near_all(
        x3.matmul(Tensor<3>::from_data(batch, device)).into_data().to_f64_vec(),
        product(values_of(x3.into_data()), batch.dequantize().to_f64_vec(), 2, rows, k, n),
        device.to_string() + " batch");
  }
}

// The fused chain runs the product as its group's head with what follows as the epilogue; the
// autodiff chain differentiates with respect to x through the quantized weight.
TEST(QuantizedProduct, FusedEpilogueAndGradientOfTheInput) {
  const std::int64_t k = 32, n = 6, rows = 5;
  const TensorData w =
      TensorData::from_vec(normal(n * k, 49), Shape{n, k}).quantize(quant_scheme(Kind::Q8_0));
  const std::vector<double> dense = w.dequantize().to_f64_vec();
  const std::vector<float> xv = normal(rows * k, 50);
  const std::vector<float> bias = normal(n, 51);
  {
    const Device device = Device::cpu().fused();
    const auto x = Tensor<2>::from_data(TensorData::from_vec(xv, {rows, k}), device);
    const auto y =
        activation::relu(module::linear(x, Tensor<2>::from_data(w, device),
                                        Tensor<1>::from_data(TensorData::from_vec(bias), device)) *
                         2.0);
    const Expected want =
        expected({xv.begin(), xv.end()}, rows, w, {bias.begin(), bias.end()}, DType::F32);
    const std::vector<double> got = y.into_data().to_f64_vec();
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], std::max(0.0, 2 * want.values[i]), 2 * want.bounds[i]) << i;
    }
  }
  const Device device = Device::cpu().autodiff();
  const auto x = Tensor<2>::from_data(TensorData::from_vec(xv, {rows, k}), device).require_grad();
  const auto q = Tensor<2>::from_data(w, device);
  const std::vector<float> seed = normal(rows * n, 52);
  const Gradients grads =
      module::linear(x, q, std::nullopt)
          .backward(Tensor<2>::from_data(TensorData::from_vec(seed, {rows, n}), device));
  // dx = g W for W [n, k] as stored.
  expect_near_all(x.grad(grads)->into_data().to_f64_vec(),
                  product({seed.begin(), seed.end()}, dense, 1, rows, n, k), "dx");
}

TEST(QuantizedProduct, RowsWithNaNStayInTheirRow) {
  const std::int64_t k = 64, n = 4;
  const TensorData w =
      TensorData::from_vec(normal(n * k, 53), Shape{n, k}).quantize(quant_scheme(Kind::Q4_0));
  std::vector<float> xv = normal(3 * k, 54);
  xv[k + 7] = std::nanf("");
  const auto x = Tensor<2>::from_data(TensorData::from_vec(xv, {3, k}), Device::cpu());
  const std::vector<float> y =
      x.matmul(Tensor<2>::from_data(w, Device::cpu()).transpose()).into_data().to_vec<float>();
  for (std::int64_t j = 0; j < n; ++j) {
    EXPECT_TRUE(std::isfinite(y[j]));
    EXPECT_TRUE(std::isnan(y[n + j]));
    EXPECT_TRUE(std::isfinite(y[2 * n + j]));
  }
}

TEST(QuantizedProduct, EmptyOperands) {
  const Device device = Device::cpu();
  const auto q = Tensor<2>::zeros({4, 32}, device).quantize(quant_scheme(Kind::Q8_0));
  EXPECT_EQ(Tensor<2>::zeros({0, 32}, device).matmul(q.transpose()).shape(), (Shape{0, 4}));
  const auto none = Tensor<2>::zeros({0, 32}, device).quantize(quant_scheme(Kind::Q8_0));
  EXPECT_EQ(Tensor<2>::zeros({3, 32}, device).matmul(none.transpose()).shape(), (Shape{3, 0}));
  const auto no_inner = Tensor<2>::zeros({4, 0}, device).quantize(quant_scheme(Kind::Q8_0));
  EXPECT_EQ(
      Tensor<2>::ones({2, 0}, device).matmul(no_inner.transpose()).into_data().to_vec<float>(),
      std::vector<float>(8, 0.0f));
}

// A product with a quantized weight takes memory for its result, not for a decoded weight.
TEST(QuantizedProduct, TheWeightIsNeverDecodedWhole) {
  const Device device = Device::cpu();
  const std::int64_t n = 1024, k = 2048;
  for (Kind kind : {Kind::Q8_0, Kind::Q4_1}) {
    const auto q = Tensor<2>::from_data(
        TensorData::from_vec(normal(n * k, 55), Shape{n, k}).quantize(quant_scheme(kind)), device);
    const auto x = Tensor<2>::ones({8, k}, device);
    device.memory_cleanup();
    device.reset_peak_memory();
    const std::int64_t before = device.memory_stats().bytes_in_use;
    const auto y = x.matmul(q.transpose());
    const std::int64_t taken = device.memory_stats().peak_bytes_in_use - before;
    EXPECT_LT(taken, n * k * 4 / 8) << quant_kind_name(kind) << ": " << taken << " bytes";
    EXPECT_EQ(y.shape(), (Shape{8, n}));
  }
}

TEST(QuantizedEmbedding, LooksUpDecodedRows) {
  const std::int64_t rows = 10, width = 64;
  for (const QuantScheme& scheme : {quant_scheme(Kind::Q8_0), quant_scheme(Kind::Q5_1)}) {
    const TensorData table =
        TensorData::from_vec(normal(rows * width, 56), Shape{rows, width}).quantize(scheme);
    const std::vector<float> dense = table.dequantize().to_vec<float>();
    for (const Device& device : devices()) {
      const auto q = Tensor<2>::from_data(table, device);
      const std::vector<std::int64_t> ids{3, 9, 0, 3, 7, 1};
      const auto indices = Tensor<2, Int>::from_data(TensorData::from_vec(ids, {2, 3}), device);
      const TensorData got = module::embedding(q, indices).into_data();
      EXPECT_EQ(got.dtype(), DType::F32);
      EXPECT_EQ(got.shape(), (Shape{2, 3, width}));
      const std::vector<float> values = got.to_vec<float>();
      for (std::size_t i = 0; i < ids.size(); ++i) {
        for (std::int64_t j = 0; j < width; ++j) {
          ASSERT_EQ(values[i * width + j], dense[ids[i] * width + j]) << device << " " << i;
        }
      }
      // The transposed table: its rows are the columns.
      const auto columns =
          Tensor<1, Int>::from_data(TensorData::from_vec(std::vector<std::int64_t>{5}), device);
      const std::vector<float> column =
          module::embedding(q.transpose(), columns).into_data().to_vec<float>();
      for (std::int64_t r = 0; r < rows; ++r) EXPECT_EQ(column[r], dense[r * width + 5]);
      // Empty and out-of-range indices.
      EXPECT_EQ(module::embedding(q, Tensor<1, Int>::zeros({0}, device)).shape(),
                (Shape{0, width}));
      test::expect_error<InvalidArgument>(
          [&] { (void)module::embedding(q, Tensor<1, Int>::full({1}, rows, device)).into_data(); },
          "embedding", {"index 10", "10 rows"});
    }
  }
}

}  // namespace
}  // namespace kiln
