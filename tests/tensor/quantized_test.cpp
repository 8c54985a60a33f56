// QFloat tensors on a device (src/tensor/quantized.cpp, src/backends/cpu/cpu_quant.cpp): uploads
// and reads that keep every byte, quantize and dequantize against float64 references, the
// tensor layer's rule that every other op sees a quantized operand dequantized, views that keep
// the blocks, moves between the CPU's decorator chains, and the errors, on the plain, fused,
// autodiff and fused autodiff CPU devices.
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/module_ops.h>
#include <kiln/quant.h>

#include <cmath>
#include <random>

#include "support/error_message.h"
#include "tensor/quantized_values.h"

namespace kiln {
namespace {

using Kind = QuantScheme::Kind;
using test::expect_error;
using namespace quantized_values;

constexpr Kind kEncodable[] = {Kind::Q4_0, Kind::Q4_1, Kind::Q5_0, Kind::Q5_1, Kind::Q8_0};
constexpr Kind kEveryGguf[] = {Kind::Q4_0, Kind::Q4_1, Kind::Q5_0, Kind::Q5_1,
                               Kind::Q8_0, Kind::Q2_K, Kind::Q3_K, Kind::Q4_K,
                               Kind::Q5_K, Kind::Q6_K, Kind::Q8_K};

bool same_bytes(const TensorData& a, const TensorData& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::equal(a.bytes().begin(), a.bytes().end(), b.bytes().begin(), b.bytes().end());
}

TEST(QuantizedTensor, UploadsAndReadsKeepEveryByteOfEveryKind) {
  std::mt19937 rng(7);
  for (const Device& device : devices()) {
    for (Kind kind : kEveryGguf) {
      const int values = quant_testing::layout(kind).values;
      const TensorData q = TensorData::quantized(quant_testing::random_blocks(kind, 6, rng),
                                                 Shape{3, 2 * values}, quant_scheme(kind));
      const auto t = Tensor<2>::from_data(q, device);
      const std::string context = device.to_string() + " " + std::string(quant_kind_name(kind));
      EXPECT_EQ(t.dtype(), DType::QFloat) << context;
      EXPECT_EQ(t.shape(), (Shape{3, 2 * values})) << context;
      const TensorData back = t.into_data();
      EXPECT_TRUE(same_bytes(back, q)) << context;
      EXPECT_EQ(back.scheme(), q.scheme()) << context;
      // Decoded on the device bit for bit as the host decodes them (llama.cpp's reference,
      // tests/quant), which is the float64 formulas' values rounded to f32 along the way.
      const TensorData decoded = t.dequantize().into_data();
      EXPECT_TRUE(same_bytes(decoded, q.dequantize())) << context;
      expect_values(decoded, reference_values(q), 1e-6, context);
      // Moves between the CPU's chains keep the blocks.
      for (const Device& other : devices()) {
        EXPECT_TRUE(same_bytes(t.to_device(other).into_data(), q)) << context << " to " << other;
      }
    }
  }
}

TEST(QuantizedTensor, QuantizeEqualsTheHostEncoderOnEveryLayout) {
  const Shape shape{6, 64};
  const std::vector<float> values = normal(shape.num_elements(), 11);
  const TensorData host = TensorData::from_vec(values, shape);
  for (const Device& device : devices()) {
    for (Kind kind : kEncodable) {
      const QuantScheme scheme = quant_scheme(kind);
      const TensorData want = host.quantize(scheme);
      const std::string context = device.to_string() + " " + std::string(quant_kind_name(kind));
      const auto x = Tensor<2>::from_data(host, device);
      EXPECT_TRUE(same_bytes(x.quantize(scheme).into_data(), want)) << context;
      // A transposed view (its transpose again), a slice with a row offset, wider and narrower
      // inputs (f64 converts exactly to f32 here; f16 values are encoded as f16 holds them).
      std::vector<float> transposed(values.size());
      for (std::int64_t r = 0; r < 6; ++r) {
        for (std::int64_t c = 0; c < 64; ++c) transposed[c * 6 + r] = values[r * 64 + c];
      }
      const auto strided =
          Tensor<2>::from_data(TensorData::from_vec(transposed, Shape{64, 6}), device).transpose();
      EXPECT_TRUE(same_bytes(strided.quantize(scheme).into_data(), want)) << context;
      const auto rows = x.slice({{2, 5}});
      const TensorData rows_want =
          TensorData::from_vec(std::vector<float>(values.begin() + 128, values.begin() + 320),
                               Shape{3, 64})
              .quantize(scheme);
      EXPECT_TRUE(same_bytes(rows.quantize(scheme).into_data(), rows_want)) << context;
      EXPECT_TRUE(same_bytes(
          Tensor<2>::from_data(host.convert(DType::F64), device).quantize(scheme).into_data(),
          want))
          << context;
      const TensorData half = host.convert(DType::F16);
      EXPECT_TRUE(same_bytes(Tensor<2>::from_data(half, device).quantize(scheme).into_data(),
                             half.quantize(scheme)))
          << context;
      // The int8 schemes too.
      for (const QuantScheme& int8 : {int8_channel_scheme(), int8_block_scheme(16)}) {
        EXPECT_TRUE(same_bytes(x.quantize(int8).into_data(), host.quantize(int8))) << context;
      }
    }
  }
}

// A round trip stays within half a step of each block's scale: the closed-form bound of
// rounding to the nearest code (Q8_0: d = max|x| / 127 per block of 32).
TEST(QuantizedTensor, RoundTripStaysWithinHalfAStep) {
  const Shape shape{5, 96};
  const std::vector<float> values = normal(shape.num_elements(), 12, 3.0f);
  for (const Device& device : devices()) {
    const auto x = Tensor<2>::from_data(TensorData::from_vec(values, shape), device);
    const std::vector<float> back =
        x.quantize(quant_scheme(Kind::Q8_0)).dequantize().into_data().to_vec<float>();
    for (std::size_t b = 0; b < values.size() / 32; ++b) {
      double amax = 0;
      for (std::size_t j = 0; j < 32; ++j)
        amax = std::max(amax, std::fabs(double(values[32 * b + j])));
      // The scale is stored in f16: its rounding adds up to 2^-11 of it per code step.
      const double step = amax / 127;
      for (std::size_t j = 0; j < 32; ++j) {
        const std::size_t i = 32 * b + j;
        EXPECT_LE(std::fabs(double(back[i]) - values[i]), step / 2 + amax * 1e-3) << i;
      }
    }
  }
}

TEST(QuantizedTensor, DequantizesToEveryFloatDType) {
  const TensorData q =
      TensorData::from_vec(normal(128, 13), Shape{4, 32}).quantize(quant_scheme(Kind::Q4_0));
  const std::vector<double> want = reference_values(q);
  for (const Device& device : devices()) {
    const auto t = Tensor<2>::from_data(q, device);
    for (DType dtype : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
      const TensorData got = t.dequantize(dtype).into_data();
      EXPECT_EQ(got.dtype(), dtype);
      const double tolerance = dtype == DType::BF16 ? 1.0 / 128 : dtype == DType::F16 ? 1e-3 : 0;
      expect_values(got, want, tolerance,
                    device.to_string() + " " + std::string(dtype_name(dtype)));
    }
    // cast to a float dtype and float_() are dequantization too.
    expect_values(t.cast(DType::F64).into_data(), want, 0, "cast");
  }
}

TEST(QuantizedTensor, EmptyTensors) {
  for (const Device& device : devices()) {
    for (const Shape& shape : {Shape{0, 32}, Shape{3, 0}}) {
      const auto x = Tensor<2>::zeros(shape, device);
      const auto q = x.quantize(quant_scheme(Kind::Q8_0));
      EXPECT_EQ(q.dtype(), DType::QFloat);
      EXPECT_EQ(q.shape(), shape);
      EXPECT_TRUE(q.into_data().bytes().empty());
      EXPECT_EQ(q.dequantize().shape(), shape);
      EXPECT_EQ((q + x).shape(), shape);
    }
  }
}

// Every op but the quantized ones, the products' weights and the dim permutations sees its
// QFloat operands dequantized (to f32), and returns float.
TEST(QuantizedTensor, OtherOpsSeeTheDequantizedValues) {
  const TensorData data =
      TensorData::from_vec(normal(6 * 32, 14), Shape{6, 32}).quantize(quant_scheme(Kind::Q8_0));
  const std::vector<double> v = reference_values(data);
  auto at = [&](std::int64_t r, std::int64_t c) { return v[static_cast<std::size_t>(r * 32 + c)]; };
  for (const Device& device : devices()) {
    const std::string context = device.to_string();
    const auto q = Tensor<2>::from_data(data, device);
    const auto x = Tensor<2>::from_data(
        TensorData::from_vec(normal(6 * 32, 15), Shape{6, 32}).convert(DType::F64), device);
    const std::vector<double> xv = x.into_data().to_f64_vec();
    // Binary ops promote the dequantized f32 with the other operand, either side.
    const TensorData sum = (q + x).into_data();
    EXPECT_EQ(sum.dtype(), DType::F64) << context;
    std::vector<double> want(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) want[i] = v[i] + xv[i];
    expect_values(sum, want, 1e-12, context + " q + x");
    for (std::size_t i = 0; i < v.size(); ++i) want[i] = xv[i] - v[i];
    expect_values((x - q).into_data(), want, 1e-12, context + " x - q");
    // Unary, scalar, reductions, comparisons.
    const TensorData exp = q.exp().into_data();
    EXPECT_EQ(exp.dtype(), DType::F32) << context;
    for (std::size_t i = 0; i < v.size(); ++i) want[i] = std::exp(v[i]);
    expect_values(exp, want, 1e-6, context + " exp");
    for (std::size_t i = 0; i < v.size(); ++i) want[i] = v[i] * 2 + 1;
    expect_values((q * 2.0 + 1.0).into_data(), want, 1e-6, context + " q * 2 + 1");
    double total = 0;
    for (double value : v) total += value;
    EXPECT_NEAR(q.sum().into_scalar<double>(), total, 1e-4) << context;
    EXPECT_EQ(q.greater_elem(0.0).into_data().to_vec<bool>()[0], v[0] > 0) << context;
    // Layout, indexing and joins.
    EXPECT_EQ(q.reshape<1>(Shape{192}).into_data().to_f64_vec(), v) << context;
    // A slice within the rows (not whole rows of blocks) is float.
    const TensorData part = q.slice({{2, 3}, {4, 9}}).into_data();
    EXPECT_EQ(part.dtype(), DType::F32) << context;
    EXPECT_EQ(part.to_f64_vec()[1], at(2, 5)) << context;
    const TensorData joined = Tensor<2>::cat({q, q}, 0).into_data();
    EXPECT_EQ(joined.shape(), (Shape{12, 32})) << context;
    EXPECT_EQ(joined.to_f64_vec()[6 * 32 + 7], at(0, 7)) << context;
    const auto index = Tensor<2, Int>::from_data(
        TensorData::from_vec(std::vector<std::int64_t>(32, 4), Shape{1, 32}), device);
    EXPECT_EQ(q.gather(0, index).into_data().to_f64_vec()[3], at(4, 3)) << context;
    const auto mask = q.lower_elem(0.0);
    const std::vector<double> clipped = q.mask_fill(mask, 0.0).into_data().to_f64_vec();
    for (std::size_t i = 0; i < v.size(); ++i) EXPECT_EQ(clipped[i], v[i] < 0 ? 0 : v[i]);
    EXPECT_EQ(q.slice({{1, 2}, {3, 4}}).into_scalar<double>(), at(1, 3)) << context;
    // Kind conversion.
    EXPECT_EQ(q.int_().into_data().to_vec<std::int64_t>()[0], static_cast<std::int64_t>(v[0]));
    // quantize of a quantized tensor encodes its values again.
    const TensorData again = q.quantize(quant_scheme(Kind::Q4_0)).into_data();
    EXPECT_TRUE(same_bytes(again, data.dequantize().quantize(quant_scheme(Kind::Q4_0))));
  }
}

// transpose and permute make views of the same blocks: still QFloat, read back as their values.
TEST(QuantizedTensor, PermutedViewsKeepTheBlocks) {
  const TensorData data = TensorData::from_vec(normal(2 * 3 * 32, 16), Shape{2, 3, 32})
                              .quantize(quant_scheme(Kind::Q4_1));
  const std::vector<double> v = reference_values(data);
  for (const Device& device : devices()) {
    const std::string context = device.to_string();
    const auto q = Tensor<3>::from_data(data, device);
    const auto view = q.permute({2, 0, 1});
    EXPECT_EQ(view.dtype(), DType::QFloat) << context;
    EXPECT_EQ(view.shape(), (Shape{32, 2, 3})) << context;
    // Read back and dequantized as the permuted values (f32: the blocks no longer run along the
    // last dim).
    for (const TensorData& read : {view.into_data(), view.dequantize().into_data()}) {
      EXPECT_EQ(read.dtype(), DType::F32) << context;
      const std::vector<double> got = read.to_f64_vec();
      for (std::int64_t c = 0; c < 32; ++c) {
        for (std::int64_t a = 0; a < 2; ++a) {
          for (std::int64_t b = 0; b < 3; ++b) {
            ASSERT_EQ(got[static_cast<std::size_t>((c * 2 + a) * 3 + b)],
                      v[static_cast<std::size_t>((a * 3 + b) * 32 + c)])
                << context;
          }
        }
      }
    }
    // Permuted back, the view is the stored tensor again: its blocks read back as they are.
    const auto back = view.permute({1, 2, 0});
    EXPECT_TRUE(same_bytes(back.into_data(), data)) << context;
    EXPECT_TRUE(same_bytes(q.swap_dims(0, 2).swap_dims(0, 2).into_data(), data)) << context;
  }
}

// Whole rows along the first dim are a range of the blocks: a view, still QFloat (a fused qkv
// weight's parts, as MultiheadAttention narrows its in_proj_weight); any other slice, or rows
// of a permuted view, is taken of the dequantized values.
TEST(QuantizedTensor, SlicesOfWholeRowsKeepTheBlocks) {
  const TensorData data = TensorData::from_vec(normal(6 * 2 * 32, 18), Shape{6, 2, 32})
                              .quantize(quant_scheme(Kind::Q5_0));
  const std::size_t row_bytes = data.bytes().size() / 6;
  const std::vector<double> v = reference_values(data);
  for (const Device& device : devices()) {
    const std::string context = device.to_string();
    const auto q = Tensor<3>::from_data(data, device);
    for (const auto& [start, end] : {std::pair<std::int64_t, std::int64_t>{1, 4}, {5, 6}, {2, 2}}) {
      const auto rows = q.narrow(0, start, end - start);
      EXPECT_EQ(rows.dtype(), DType::QFloat) << context;
      const TensorData got = rows.into_data();
      const TensorData want = TensorData::quantized(
          {data.bytes().begin() + start * row_bytes, data.bytes().begin() + end * row_bytes},
          Shape{end - start, 2, 32}, data.scheme());
      EXPECT_TRUE(same_bytes(got, want)) << context << " rows " << start << ".." << end;
      // Views of the view: its rows again, its transpose into a product.
      if (end - start >= 2) {
        EXPECT_TRUE(same_bytes(rows.slice({{1, 2}}).into_data(),
                               TensorData::quantized({want.bytes().begin() + row_bytes,
                                                      want.bytes().begin() + 2 * row_bytes},
                                                     Shape{1, 2, 32}, data.scheme())))
            << context;
      }
    }
    // Stepped rows and slices inside a row: the values.
    const std::vector<double> stepped = q.slice({Slice(0, 6, 2)}).into_data().to_f64_vec();
    ASSERT_EQ(stepped.size(), 3u * 64);
    for (std::size_t i = 0; i < 64; ++i) EXPECT_EQ(stepped[64 + i], v[128 + i]) << context;
    const TensorData inner = q.slice({{0, 6}, {1, 2}}).into_data();
    EXPECT_EQ(inner.dtype(), DType::F32);
    EXPECT_EQ(inner.to_f64_vec()[32], v[64 + 32]) << context;
    // Rows of the transposed view are columns of the blocks: the values.
    const TensorData columns = q.swap_dims(0, 2).narrow(0, 3, 1).into_data();
    EXPECT_EQ(columns.dtype(), DType::F32);
    EXPECT_EQ(columns.shape(), (Shape{1, 2, 6}));
    EXPECT_EQ(columns.to_f64_vec()[1], v[64 + 3]) << context;
  }
}

TEST(QuantizedTensor, ProductsAndLookupsWithAQuantizedWeight) {
  const std::int64_t m = 3, k = 64, n = 5;
  const TensorData w =
      TensorData::from_vec(normal(n * k, 17), Shape{n, k}).quantize(quant_scheme(Kind::Q8_0));
  const std::vector<double> wv = reference_values(w);
  const std::vector<float> xv = normal(m * k, 18);
  for (const Device& device : devices()) {
    const std::string context = device.to_string();
    const auto x = Tensor<2>::from_data(TensorData::from_vec(xv, Shape{m, k}), device);
    const auto q = Tensor<2>::from_data(w, device);
    std::vector<double> want(static_cast<std::size_t>(m * n));
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (std::int64_t p = 0; p < k; ++p) sum += xv[i * k + p] * wv[j * k + p];
        want[static_cast<std::size_t>(i * n + j)] = sum;
      }
    }
    expect_values(x.matmul(q.transpose()).into_data(), want, 1e-2, context + " matmul");
    expect_values(module::linear(x, q, std::nullopt).into_data(), want, 1e-2, context + " linear");
    // The table's rows, looked up.
    const auto ids = Tensor<1, Int>::from_data(
        TensorData::from_vec(std::vector<std::int64_t>{4, 0, 4}, Shape{3}), device);
    const TensorData rows = module::embedding(q, ids).into_data();
    EXPECT_EQ(rows.dtype(), DType::F32) << context;
    const std::vector<double> got = rows.to_f64_vec();
    for (std::int64_t p = 0; p < k; ++p) {
      EXPECT_EQ(got[static_cast<std::size_t>(p)], wv[static_cast<std::size_t>(4 * k + p)]);
      EXPECT_EQ(got[static_cast<std::size_t>(k + p)], wv[static_cast<std::size_t>(p)]);
    }
  }
}

TEST(QuantizedTensor, ErrorsNameTheOpAndTheValues) {
  const Device device = Device::cpu();
  const QuantScheme q8 = quant_scheme(Kind::Q8_0);
  const auto ints = Tensor<2, Int>::zeros({2, 32}, device);
  expect_error<DTypeMismatch>([&] { (void)detail::quantize(ints.primitive(), q8); }, "quantize",
                              {"float", "i64"});
  expect_error<ShapeMismatch>(
      [&] {
        (void)Tensor<2>::zeros({2, 33}, device).quantize(q8);
      },
      "quantize", {"[2, 33]", "32"});
  expect_error<InvalidArgument>(
      [&] {
        (void)Tensor<2>::full({1, 32}, std::nan(""), device).quantize(q8);
      },
      "quantize", {"nan", "index 0"});
  expect_error<UnsupportedOperation>(
      [&] {
        (void)Tensor<2>::zeros({1, 256}, device).quantize(quant_scheme(Kind::Q2_K));
      },
      "quantize", {"Q2_K"});
  expect_error<ShapeMismatch>(
      [&] {
        (void)Tensor<2>::zeros({1, 96}, device).quantize(quant_scheme(Kind::Q4_K));
      },
      "quantize", {"[1, 96]", "Q4_K's 256"});
  expect_error<InvalidArgument>(
      [&] {
        (void)Tensor<2>::zeros({1, 32}, device).quantize(QuantScheme{Kind::Q8_0, 16});
      },
      "quantize", {"block size 32", "16"});
  const auto q = Tensor<2>::zeros({2, 32}, device).quantize(q8);
  expect_error<DTypeMismatch>(
      [&] {
        (void)Tensor<2>::zeros({2, 32}, device).dequantize();
      },
      "dequantize", {"f32", "not qfloat"});
  expect_error<DTypeMismatch>([&] { (void)detail::dequantize(q.primitive(), DType::I32); },
                              "dequantize", {"i32"});
  expect_error<UnsupportedDType>(
      [&] {
        (void)Tensor<2>::zeros({2, 32}, device, DType::QFloat);
      },
      "full", {"quantize"});
  expect_error<UnsupportedDType>(
      [&] { (void)detail::cast(Tensor<1>::zeros({2}, device).primitive(), DType::QFloat); }, "cast",
      {"quantize"});
  Tensor<2> target = q;
  expect_error<UnsupportedDType>(
      [&] {
        target.assign(Tensor<2>::zeros({2, 32}, device));
      },
      "assign", {"qfloat"});
  // A quantized source is written as its values.
  Tensor<2> floats = Tensor<2>::ones({2, 32}, device);
  floats.assign(q);
  EXPECT_EQ(floats.into_data().to_vec<float>(), std::vector<float>(64, 0.0f));
  expect_error<AutodiffError>([&] { (void)q.to_device(device.autodiff()).require_grad(); },
                              "require_grad", {"qfloat"});
}

}  // namespace
}  // namespace kiln
