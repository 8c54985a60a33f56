// QFloat tensors on cuda (src/backends/cuda/cuda_quant*.cpp, quant_source.cpp): the blocks of
// every scheme round trip bit for bit (into_data, to_device both ways, read_many); dequantize is
// the host decoder bit for bit (NaN as NaN) in every float dtype, views included; views permute
// the blocks or take whole rows; quantize gives the host encoder's bytes; matmul, linear and
// embedding with a quantized weight against a float64 product of the dequantized weight and
// against the CPU's quantized product: every scheme, x in f32, f64, f16 and bf16, batches 1, 3,
// 8, 33, 64 and 300, weights of partial tiles, strided x, NaN rows, empty tensors, the fused and
// autodiff chains; the errors.
#include <kiln/module_ops.h>
#include <kiln/quant.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/quant_matvec.h"
#include "backends/cuda/quant.h"
#include "gpu/gpu_test_support.h"
#include "quant/block_reference.h"
#include "support/int8_rounded_x.h"

using namespace kiln;

namespace gpu_quant {

using QKind = QuantScheme::Kind;

std::vector<float> normal_values(std::int64_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// Blocks of every kind for a [rows, cols] weight: random blocks (finite scales) for the kinds
// kiln only decodes, the encoder's blocks of normal values for the others.
TensorData weight_of(const QuantScheme& scheme, std::int64_t rows, std::int64_t cols,
                     std::uint32_t seed) {
  if (can_quantize(scheme)) {
    return TensorData::from_vec(normal_values(rows * cols, seed), Shape{rows, cols})
        .quantize(scheme);
  }
  std::mt19937 rng(seed);
  const auto layout = quant_testing::layout(scheme.kind);
  std::vector<std::byte> bytes =
      quant_testing::random_blocks(scheme.kind, static_cast<int>(rows * cols / layout.values), rng);
  // Modest scales: products of large random scales would reach f32's range.
  for (std::size_t b = 0; b < bytes.size() / static_cast<std::size_t>(layout.bytes); ++b) {
    for (int at : quant_testing::f16_fields(scheme.kind)) {
      const auto bits = static_cast<std::uint16_t>(0x1800 + (rng() & 0x0FFF) + ((rng() & 1) << 15));
      std::memcpy(bytes.data() + b * static_cast<std::size_t>(layout.bytes) + at, &bits, 2);
    }
    if (scheme.kind == QKind::Q8_K) {
      const float d = std::uniform_real_distribution<float>(-0.01f, 0.01f)(rng);
      std::memcpy(bytes.data() + b * static_cast<std::size_t>(layout.bytes), &d, 4);
    }
  }
  return TensorData::quantized(std::move(bytes), Shape{rows, cols}, scheme);
}

std::vector<QuantScheme> every_scheme() {
  std::vector<QuantScheme> schemes;
  for (QKind kind : {QKind::Q4_0, QKind::Q4_1, QKind::Q5_0, QKind::Q5_1, QKind::Q8_0, QKind::Q2_K,
                     QKind::Q3_K, QKind::Q4_K, QKind::Q5_K, QKind::Q6_K, QKind::Q8_K}) {
    schemes.push_back(quant_scheme(kind));
  }
  schemes.push_back(int8_block_scheme(32));
  schemes.push_back(int8_block_scheme(512));
  schemes.push_back(int8_block_scheme(48));  // the product decodes it: no tile fits
  schemes.push_back(int8_channel_scheme());
  return schemes;
}

std::string name_of(const QuantScheme& scheme) {
  return std::string(quant_kind_name(scheme.kind)) +
         (scheme.kind == QKind::Int8Block ? "(" + std::to_string(scheme.block_size) + ")" : "");
}

// Columns a row of the test weights has: whole blocks of every scheme (int8 512 included) and
// more than one 256-value tile, the last one short for the 32-value kinds.
std::int64_t cols_for(const QuantScheme& scheme) {
  if (scheme.kind == QKind::Int8Block && scheme.block_size == 48) return 480;
  if (scheme.block_size == 256 || scheme.block_size == 512) return 1024;
  return 544;
}

bool same_bytes(const TensorData& a, const TensorData& b) {
  return std::equal(a.bytes().begin(), a.bytes().end(), b.bytes().begin(), b.bytes().end());
}

// Equal f32 bits, or both NaN.
void expect_same_floats(const TensorData& got, const TensorData& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = got.to_f64_vec(), w = want.to_f64_vec();
  int reported = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const bool same = (std::isnan(g[i]) && std::isnan(w[i])) ||
                      std::bit_cast<std::uint64_t>(g[i]) == std::bit_cast<std::uint64_t>(w[i]);
    if (!same && reported++ < 5)
      ADD_FAILURE() << what << " at " << i << ": " << g[i] << " vs " << w[i];
  }
}

TEST(GpuQuant, BlocksRoundTripBitForBit) {
  KILN_REQUIRE_GPU();
  for (const QuantScheme& scheme : every_scheme()) {
    const std::string name = name_of(scheme);
    const TensorData q = weight_of(scheme, 6, cols_for(scheme), 3001);
    const auto t = Tensor<2>::from_data(q, device);
    EXPECT_EQ(t.dtype(), DType::QFloat) << name;
    EXPECT_EQ(t.shape(), q.shape()) << name;
    const TensorData back = t.into_data();
    ASSERT_EQ(back.dtype(), DType::QFloat) << name;
    EXPECT_EQ(back.scheme(), scheme) << name;
    EXPECT_EQ(back.shape(), q.shape()) << name;
    EXPECT_TRUE(same_bytes(back, q)) << name;
    // To the CPU and back, and through the fused and autodiff forms of the device.
    const auto cpu = t.to_device(Device::cpu());
    EXPECT_TRUE(same_bytes(cpu.into_data(), q)) << name;
    EXPECT_TRUE(same_bytes(cpu.to_device(device).into_data(), q)) << name;
    EXPECT_TRUE(same_bytes(t.to_device(device.fused()).into_data(), q)) << name;
    EXPECT_TRUE(same_bytes(t.to_device(device.autodiff()).into_data(), q)) << name;
    // Three dims, and none.
    const TensorData q3 =
        TensorData::quantized(std::vector<std::byte>(q.bytes().begin(), q.bytes().end()),
                              Shape{2, 3, cols_for(scheme)}, scheme);
    EXPECT_TRUE(same_bytes(Tensor<3>::from_data(q3, device).into_data(), q3)) << name;
  }
  const TensorData empty = TensorData::quantized({}, Shape{0, 64}, quant_scheme(QKind::Q8_0));
  const TensorData back = Tensor<2>::from_data(empty, device).into_data();
  EXPECT_EQ(back.shape(), (Shape{0, 64}));
  EXPECT_EQ(back.bytes().size(), 0u);
  // read_many: blocks and floats in one transaction.
  const TensorData q = weight_of(quant_scheme(QKind::Q4_K), 4, 256, 3002);
  const auto a = Tensor<2>::from_data(q, device);
  const auto f = Tensor<2>::from_data(TensorData::from_vec(normal_values(8, 3003), {2, 4}), device);
  const std::vector<TensorData> both = detail::read_many({a.primitive(), f.primitive()});
  EXPECT_TRUE(same_bytes(both[0], q));
  EXPECT_EQ(both[1].dtype(), DType::F32);
}

TEST(GpuQuant, ReportsItsStorageAndScheme) {
  KILN_REQUIRE_GPU();
  EXPECT_TRUE(device.dtype_usage(DType::QFloat).contains(DTypeUsage::Storage));
  EXPECT_FALSE(device.dtype_usage(DType::QFloat).contains(DTypeUsage::Arithmetic));
  const auto t = Tensor<2>::from_data(weight_of(int8_channel_scheme(), 3, 64, 3004), device);
  ASSERT_NE(t.primitive()->quant_scheme(), nullptr);
  EXPECT_EQ(*t.primitive()->quant_scheme(), int8_channel_scheme());
}

TEST(GpuQuant, DequantizeIsTheHostDecoderBitForBit) {
  KILN_REQUIRE_GPU();
  for (const QuantScheme& scheme : every_scheme()) {
    const std::string name = name_of(scheme);
    const TensorData q = weight_of(scheme, 5, cols_for(scheme), 3005);
    const TensorData want = q.dequantize();
    const auto t = Tensor<2>::from_data(q, device);
    expect_same_floats(t.dequantize().into_data(), want, name);
    for (DType dtype : {DType::F64, DType::F16, DType::BF16}) {
      expect_same_floats(t.dequantize(dtype).into_data(), want.convert(dtype),
                         name + " to " + std::string(dtype_name(dtype)));
    }
    // The transposed view decodes to the transposed values, and reads back decoded.
    const TensorData transposed = Tensor<2>::from_data(want, Device::cpu()).transpose().into_data();
    expect_same_floats(t.transpose().dequantize().into_data(), transposed, name + " transposed");
    expect_same_floats(t.transpose().into_data(), transposed, name + " transposed read");
    // Any other op sees the values: q + 0 is the decoded tensor plus 0 (where -0 becomes +0).
    expect_same_floats((t + 0.0).into_data(),
                       (Tensor<2>::from_data(want, Device::cpu()) + 0.0).into_data(),
                       name + " + 0");
  }
  // Edge-case scales: zero, -0, subnormal, the largest f16, infinity.
  std::mt19937 rng(3006);
  for (QKind kind :
       {QKind::Q4_0, QKind::Q4_1, QKind::Q8_0, QKind::Q4_K, QKind::Q6_K, QKind::Q2_K}) {
    std::vector<std::byte> bytes;
    for (std::uint16_t bits : {0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0xFC00}) {
      std::vector<std::byte> block = quant_testing::random_blocks(kind, 1, rng);
      for (int at : quant_testing::f16_fields(kind)) std::memcpy(block.data() + at, &bits, 2);
      bytes.insert(bytes.end(), block.begin(), block.end());
    }
    const auto layout = quant_testing::layout(kind);
    const TensorData q = TensorData::quantized(bytes, Shape{6, layout.values}, quant_scheme(kind));
    expect_same_floats(Tensor<2>::from_data(q, device).dequantize().into_data(), q.dequantize(),
                       std::string(quant_kind_name(kind)) + " edge scales");
  }
}

TEST(GpuQuant, ViewsPermuteTheBlocksOrTakeWholeRows) {
  KILN_REQUIRE_GPU();
  const QuantScheme scheme = quant_scheme(QKind::Q4_K);
  const TensorData q = weight_of(scheme, 12, 512, 3007);
  const auto t = Tensor<2>::from_data(q, device);
  const auto host = Tensor<2>::from_data(q, Device::cpu());
  // Whole rows along dim 0 stay blocks: the same bytes as the CPU's slice.
  for (const auto& [start, end] : {std::pair{0, 12}, {3, 7}, {11, 12}, {5, 5}}) {
    const auto part = t.slice({Slice(start, end), Slice::all()});
    const TensorData got = part.into_data();
    ASSERT_EQ(got.dtype(), DType::QFloat);
    EXPECT_TRUE(same_bytes(got, host.slice({Slice(start, end), Slice::all()}).into_data()))
        << start << ":" << end;
    EXPECT_EQ(got.shape(), (Shape{end - start, 512}));
  }
  EXPECT_TRUE(same_bytes(t.narrow(0, 2, 4).into_data(), host.narrow(0, 2, 4).into_data()));
  // A slice inside the rows is f32 values; so is a strided row slice.
  expect_same_floats(t.slice({Slice(1, 3), Slice(32, 96)}).into_data(),
                     host.slice({Slice(1, 3), Slice(32, 96)}).into_data(), "inside rows");
  expect_same_floats(t.slice({Slice(0, 12, 2), Slice::all()}).into_data(),
                     host.slice({Slice(0, 12, 2), Slice::all()}).into_data(), "strided rows");
  // Transposing twice is the blocks again; a slice of rows of a slice is the CPU's.
  EXPECT_TRUE(same_bytes(t.transpose().transpose().into_data(), q));
  EXPECT_TRUE(same_bytes(t.narrow(0, 2, 8).narrow(0, 1, 3).into_data(),
                         host.narrow(0, 2, 8).narrow(0, 1, 3).into_data()));
  // Three dims: permute and swap_dims as views, read back decoded where blocks moved.
  const TensorData q3 = TensorData::quantized(
      std::vector<std::byte>(q.bytes().begin(), q.bytes().end()), Shape{3, 4, 512}, scheme);
  const auto t3 = Tensor<3>::from_data(q3, device);
  const auto h3 = Tensor<3>::from_data(q3, Device::cpu());
  expect_same_floats(t3.swap_dims(0, 1).into_data(), h3.swap_dims(0, 1).into_data(), "swap_dims");
  expect_same_floats(t3.permute({2, 0, 1}).into_data(), h3.permute({2, 0, 1}).into_data(),
                     "permute");
  expect_same_floats(t3.permute({2, 0, 1}).dequantize(DType::BF16).into_data(),
                     h3.permute({2, 0, 1}).dequantize(DType::BF16).into_data(), "permute bf16");
  // A view on the other device: moved decoded where its blocks moved.
  if (Device::count(DeviceKind::Cuda) > 1) {
    const Device other = Device::cuda(1);
    EXPECT_TRUE(same_bytes(t.to_device(other).into_data(), q));
    expect_same_floats(t.transpose().to_device(other).into_data(), host.transpose().into_data(),
                       "transposed to cuda:1");
  }
}

TEST(GpuQuant, QuantizeGivesTheHostEncodersBytes) {
  KILN_REQUIRE_GPU();
  for (const QuantScheme& scheme : every_scheme()) {
    if (!can_quantize(scheme)) continue;
    const std::int64_t cols = cols_for(scheme);
    const std::vector<float> values = normal_values(4 * cols, 3008);
    const TensorData want = TensorData::from_vec(values, Shape{4, cols}).quantize(scheme);
    for (DType dtype : {DType::F32, DType::BF16, DType::F64}) {
      const auto x = Tensor<2>::from_data(TensorData::from_vec(values, Shape{4, cols}), device);
      const TensorData host =
          TensorData::from_vec(values, Shape{4, cols}).convert(dtype).quantize(scheme);
      const TensorData got = x.cast(dtype).quantize(scheme).into_data();
      EXPECT_TRUE(same_bytes(got, host)) << name_of(scheme) << " " << dtype_name(dtype);
    }
    EXPECT_TRUE(
        same_bytes(Tensor<2>::from_data(TensorData::from_vec(values, Shape{4, cols}), device)
                       .transpose()
                       .transpose()
                       .quantize(scheme)
                       .into_data(),
                   want))
        << name_of(scheme);
  }
}

TEST(GpuQuant, Errors) {
  KILN_REQUIRE_GPU();
  const auto x = Tensor<2>::from_data(
      TensorData::from_vec(std::vector<float>{1, 2, NAN, 4}, Shape{1, 4}).convert(DType::F32),
      device);
  const auto wide = Tensor<2>::full({2, 32}, 1.0, device);
  std::vector<float> with_nan(64, 1.0f);
  with_nan[37] = NAN;
  const auto nan_x = Tensor<2>::from_data(TensorData::from_vec(with_nan, Shape{2, 32}), device);
  EXPECT_THROW((void)nan_x.quantize(quant_scheme(QKind::Q8_0)), InvalidArgument);
  try {
    (void)nan_x.quantize(quant_scheme(QKind::Q8_0));
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("[quantize]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("flat index 37"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)Tensor<2>::full({2, 256}, 1.0, device).quantize(quant_scheme(QKind::Q2_K)),
               UnsupportedOperation);
  EXPECT_THROW((void)Tensor<2>::full({2, 33}, 1.0, device).quantize(quant_scheme(QKind::Q8_0)),
               ShapeMismatch);
  auto q = wide.quantize(quant_scheme(QKind::Q8_0));
  EXPECT_THROW(q.assign(wide), UnsupportedDType);
  EXPECT_THROW((void)wide.cast(DType::QFloat), Error);
  EXPECT_THROW((void)Tensor<2>::empty({2, 32}, device, DType::QFloat), UnsupportedDType);
  EXPECT_THROW((void)wide.dequantize(), DTypeMismatch);
  // The product's shape checks are the tensor layer's.
  EXPECT_THROW((void)x.matmul(q.transpose()), ShapeMismatch);
  // An embedding index out of range: reported at the read, naming embedding.
  const auto ids =
      Tensor<1, Int>::from_data(TensorData::from_vec(std::vector<std::int64_t>{0, 7}), device);
  EXPECT_THROW((void)module::embedding(q, ids).into_data(), Error);
}

// ---- products ----

// y[r, j] = sum_i x[r, i] W[j, i] (+ bias[j]) in float64 over the decoded weight W [n, k], with
// the magnitude sum |x w| each error is measured against.
struct Reference {
  std::vector<double> values, magnitudes;
};
Reference reference(const std::vector<double>& x_values, DType dtype, std::int64_t rows,
                    const TensorData& w, const std::vector<double>& bias) {
  const std::int64_t n = w.shape()[0], k = w.shape()[1];
  // x as the product sees it.
  const std::vector<double> x = kiln::cuda::quant_rounds_x(w.scheme().kind, dtype, rows)
                                    ? test::int8_rounded_x(x_values, k)
                                    : x_values;
  const std::vector<double> dense = w.dequantize().to_f64_vec();
  Reference out;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = bias.empty() ? 0.0 : bias[static_cast<std::size_t>(j)];
      double magnitude = std::fabs(sum);
      for (std::int64_t i = 0; i < k; ++i) {
        const double p =
            x[static_cast<std::size_t>(r * k + i)] * dense[static_cast<std::size_t>(j * k + i)];
        sum += p;
        magnitude += std::fabs(p);
      }
      out.values.push_back(sum);
      out.magnitudes.push_back(magnitude);
    }
  }
  return out;
}

// The result's rounding to dtype plus f32 sums: relative to the magnitude for the sums (tensor-core
// accumulation included), to the value for the final rounding.
void expect_product(const TensorData& got, const Reference& want, DType dtype,
                    const std::string& what) {
  ASSERT_EQ(got.dtype(), dtype) << what;
  const std::vector<double> g = got.to_f64_vec();
  ASSERT_EQ(g.size(), want.values.size()) << what;
  const double rounding = dtype == DType::BF16  ? 1.0 / 128
                          : dtype == DType::F16 ? 1.0 / 1024
                                                : 1e-7;
  int reported = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double bound = 2e-5 * want.magnitudes[i] + rounding * std::fabs(want.values[i]) + 1e-30;
    if (!(std::fabs(g[i] - want.values[i]) <= bound) && reported++ < 5) {
      ADD_FAILURE() << what << " at " << i << ": " << g[i] << " vs " << want.values[i] << " (bound "
                    << bound << ")";
    }
  }
}

TEST(GpuQuant, ProductsMatchFloat64OverSchemesDTypesAndBatches) {
  KILN_REQUIRE_GPU();
  const std::int64_t n = 80;  // a partial tile of 64 weight rows
  for (const QuantScheme& scheme : every_scheme()) {
    const std::int64_t k = cols_for(scheme);
    const TensorData w = weight_of(scheme, n, k, 3010);
    const auto q = Tensor<2>::from_data(w, device);
    const std::vector<float> bias_values = normal_values(n, 3011);
    for (DType dtype : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
      for (std::int64_t rows : {1, 3, 8, 33, 64}) {
        const std::string what = name_of(scheme) + " " + std::string(dtype_name(dtype)) + " rows " +
                                 std::to_string(rows);
        const auto x = Tensor<2>::from_data(
                           TensorData::from_vec(normal_values(rows * k, 3012), {rows, k}), device)
                           .cast(dtype);
        const auto bias =
            Tensor<1>::from_data(TensorData::from_vec(bias_values), device).cast(dtype);
        const std::vector<double> xv = x.into_data().to_f64_vec();
        const std::vector<double> bv = bias.into_data().to_f64_vec();
        expect_product(module::linear(x, q, bias).into_data(), reference(xv, dtype, rows, w, bv),
                       dtype, what + " linear");
        expect_product(x.matmul(q.transpose()).into_data(), reference(xv, dtype, rows, w, {}),
                       dtype, what + " matmul");
      }
    }
  }
}

// got and want, products x w^T of one x, agree within 1e-3 relative, plus (x_block > 0) the
// error of one of them having rounded x to int8 blocks of x_block values: each value off by at
// most half its block's step amax / 127, independently, so the sum over k is off by a normal
// error whose sigma is sqrt(sum (w step)^2 / 12); six of them are allowed.
void expect_within_x_rounding(const TensorData& got, const TensorData& want, const TensorData& x,
                              const TensorData& w, std::int64_t x_block, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = got.to_f64_vec(), r = want.to_f64_vec(), xs = x.to_f64_vec();
  const auto ws = w.dequantize().to_f64_vec();
  const std::int64_t rows = x.shape()[0], k = x.shape()[1], n = w.shape()[0];
  int reported = 0;
  for (std::int64_t row = 0; row < rows; ++row) {
    std::vector<double> step(static_cast<std::size_t>(k), 0.0);
    for (std::int64_t b = 0; x_block > 0 && b < k; b += x_block) {
      double amax = 0;
      for (std::int64_t j = b; j < std::min(k, b + x_block); ++j)
        amax = std::max(amax, std::fabs(xs[static_cast<std::size_t>(row * k + j)]));
      for (std::int64_t j = b; j < std::min(k, b + x_block); ++j)
        step[static_cast<std::size_t>(j)] = amax / 127;
    }
    for (std::int64_t i = 0; i < n; ++i) {
      double variance = 0;
      for (std::int64_t j = 0; j < k; ++j) {
        const double e =
            ws[static_cast<std::size_t>(i * k + j)] * step[static_cast<std::size_t>(j)];
        variance += e * e / 12;
      }
      const auto at = static_cast<std::size_t>(row * n + i);
      const double tolerance = 6 * std::sqrt(variance) + 1e-3 * (1 + std::fabs(r[at]));
      if (!(std::fabs(g[at] - r[at]) <= tolerance) && reported++ < 5) {
        ADD_FAILURE() << what << " element " << at << ": " << g[at] << " vs " << r[at]
                      << " (tolerance " << tolerance << ")";
      }
    }
  }
}

TEST(GpuQuant, ProductsMatchTheCpusQuantizedProduct) {
  KILN_REQUIRE_GPU();
  const std::int64_t n = 64, k = 256;
  for (const QuantScheme& scheme :
       {quant_scheme(QKind::Q8_0), quant_scheme(QKind::Q4_0), quant_scheme(QKind::Q4_K),
        quant_scheme(QKind::Q6_K), int8_channel_scheme()}) {
    const TensorData w = weight_of(scheme, n, k, 3013);
    for (std::int64_t rows : {1, 8, 33}) {
      const TensorData xd = TensorData::from_vec(normal_values(rows * k, 3014), {rows, k});
      const auto on = [&](const Device& d) {
        return module::linear(Tensor<2>::from_data(xd, d), Tensor<2>::from_data(w, d), std::nullopt)
            .into_data();
      };
      // The CPU's VNNI kernels round x to int8 blocks of 32 (scale amax / 127) for every GGUF kind
      // of weights, the GPU's kernels at up to 64 rows; the other products are f32 sums of the
      // decoded weight.
      const bool int8_x = cpu::rounds_x_to_int8(scheme.kind) ||
                          kiln::cuda::quant_rounds_x(scheme.kind, DType::F32, rows);
      expect_within_x_rounding(on(device), on(Device::cpu()), xd, w, int8_x ? 32 : 0,
                               name_of(scheme) + " rows " + std::to_string(rows));
    }
  }
}

TEST(GpuQuant, LargeBatchesStridedInputsAndThreeDims) {
  KILN_REQUIRE_GPU();
  const std::int64_t n = 136, k = 512;
  const TensorData w = weight_of(quant_scheme(QKind::Q4_K), n, k, 3015);
  const auto q = Tensor<2>::from_data(w, device);
  // 300 rows: two launches of the product (256 rows each at most), with a bias.
  const auto x =
      Tensor<2>::from_data(TensorData::from_vec(normal_values(300 * k, 3016), {300, k}), device);
  const auto bias = Tensor<1>::from_data(TensorData::from_vec(normal_values(n, 3017)), device);
  for (DType dtype : {DType::F32, DType::BF16}) {
    const auto xc = x.cast(dtype);
    const auto bc = bias.cast(dtype);
    expect_product(
        module::linear(xc, q, bc).into_data(),
        reference(xc.into_data().to_f64_vec(), dtype, 300, w, bc.into_data().to_f64_vec()), dtype,
        std::string("300 rows ") + std::string(dtype_name(dtype)));
  }
  // x [2, 3, k] as a permuted view of [k, 3, 2]; and a transposed 2-D x.
  const auto base =
      Tensor<3>::from_data(TensorData::from_vec(normal_values(k * 6, 3018), {k, 3, 2}), device);
  const auto x3 = base.permute({2, 1, 0});
  const TensorData y3 = module::linear(x3, q, std::nullopt).into_data();
  EXPECT_EQ(y3.shape(), (Shape{2, 3, n}));
  expect_product(y3, reference(x3.into_data().to_f64_vec(), DType::F32, 6, w, {}), DType::F32,
                 "3-D view");
  const auto cols =
      Tensor<2>::from_data(TensorData::from_vec(normal_values(k * 5, 3019), {k, 5}), device);
  expect_product(cols.transpose().matmul(q.transpose()).into_data(),
                 reference(cols.transpose().into_data().to_f64_vec(), DType::F32, 5, w, {}),
                 DType::F32, "transposed x");
  // x at an odd offset (a slice of a bf16 row): copied to an aligned buffer first.
  const auto wide = Tensor<2>::from_data(
                        TensorData::from_vec(normal_values(2 * (k + 1), 3020), {2, k + 1}), device)
                        .cast(DType::BF16);
  const auto odd = wide.slice({Slice::all(), Slice(1, k + 1)});
  expect_product(odd.matmul(q.transpose()).into_data(),
                 reference(odd.into_data().to_f64_vec(), DType::BF16, 2, w, {}), DType::BF16,
                 "odd offset");
}

TEST(GpuQuant, NanRowsAndEmptyTensors) {
  KILN_REQUIRE_GPU();
  const std::int64_t n = 70, k = 256;
  const TensorData w = weight_of(quant_scheme(QKind::Q8_0), n, k, 3021);
  const auto q = Tensor<2>::from_data(w, device);
  for (DType dtype : {DType::F32, DType::BF16}) {
    std::vector<float> values = normal_values(3 * k, 3022);
    values[static_cast<std::size_t>(k + 17)] = NAN;  // row 1
    const auto x = Tensor<2>::from_data(TensorData::from_vec(values, {3, k}), device).cast(dtype);
    const std::vector<double> y = x.matmul(q.transpose()).into_data().to_f64_vec();
    for (std::int64_t j = 0; j < n; ++j) {
      EXPECT_TRUE(std::isfinite(y[static_cast<std::size_t>(j)])) << j;
      EXPECT_TRUE(std::isnan(y[static_cast<std::size_t>(n + j)])) << j;
      EXPECT_TRUE(std::isfinite(y[static_cast<std::size_t>(2 * n + j)])) << j;
    }
  }
  // No rows of x; a weight of no rows.
  const auto none =
      Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{}, {0, k}), device);
  EXPECT_EQ(none.matmul(q.transpose()).into_data().shape(), (Shape{0, n}));
  const auto q0 = Tensor<2>::from_data(
      TensorData::quantized({}, Shape{0, k}, quant_scheme(QKind::Q8_0)), device);
  const auto x =
      Tensor<2>::from_data(TensorData::from_vec(normal_values(2 * k, 3023), {2, k}), device);
  EXPECT_EQ(x.matmul(q0.transpose()).into_data().shape(), (Shape{2, 0}));
}

TEST(GpuQuant, OtherLayoutsOfTheWeightAreItsDecodedProduct) {
  KILN_REQUIRE_GPU();
  const std::int64_t k = 5, n = 64, rows = 3;
  // [k, n] in its stored order as the right operand: blocks along n.
  const TensorData w = weight_of(quant_scheme(QKind::Q4_0), k, n, 3024);
  const auto x =
      Tensor<2>::from_data(TensorData::from_vec(normal_values(rows * k, 3025), {rows, k}), device);
  test::expect_near_all(
      x.matmul(Tensor<2>::from_data(w, device)).into_data(),
      x.to_device(Device::cpu()).matmul(Tensor<2>::from_data(w, Device::cpu())).into_data(), 1e-5,
      "stored order");
  // [2, k, n] quantized: a batch of weights.
  const TensorData batch = TensorData::from_vec(normal_values(2 * k * n, 3026), Shape{2, k, n})
                               .quantize(quant_scheme(QKind::Q8_0));
  const auto x3 = Tensor<3>::from_data(
      TensorData::from_vec(normal_values(2 * rows * k, 3027), {2, rows, k}), device);
  test::expect_near_all(
      x3.matmul(Tensor<3>::from_data(batch, device)).into_data(),
      x3.to_device(Device::cpu()).matmul(Tensor<3>::from_data(batch, Device::cpu())).into_data(),
      1e-5, "batch of weights");
}

TEST(GpuQuant, FusedAndAutodiffChains) {
  KILN_REQUIRE_GPU();
  const std::int64_t n = 48, k = 256, rows = 5;
  const TensorData w = weight_of(quant_scheme(QKind::Q6_K), n, k, 3028);
  const TensorData xd = TensorData::from_vec(normal_values(rows * k, 3029), {rows, k});
  const TensorData bd = TensorData::from_vec(normal_values(n, 3030));
  const auto run = [&](const Device& d) {
    const auto q = Tensor<2>::from_data(w, d);
    const auto x = Tensor<2>::from_data(xd, d);
    const auto b = Tensor<1>::from_data(bd, d);
    return activation::relu(module::linear(x * 2.0, q, b) + 1.0).into_data();
  };
  const TensorData plain = run(device);
  expect_same_floats(run(device.fused()), plain, "fused");
  expect_same_floats(run(device.autodiff()), plain, "autodiff");
  // The gradient with respect to x through the quantized weight: bias-free, sum of y is
  // x . (sum of W's rows), so dx[r] = that sum.
  const Device ad = device.autodiff();
  const auto q = Tensor<2>::from_data(w, ad);
  const auto x = Tensor<2>::from_data(xd, ad).require_grad();
  const auto grads = module::linear(x, q, std::nullopt).sum().backward();
  const std::vector<double> dx = x.grad(grads).value().into_data().to_f64_vec();
  const std::vector<double> dense = w.dequantize().to_f64_vec();
  for (std::int64_t i = 0; i < k; ++i) {
    double want = 0;
    for (std::int64_t j = 0; j < n; ++j) want += dense[static_cast<std::size_t>(j * k + i)];
    for (std::int64_t r = 0; r < rows; ++r) {
      EXPECT_NEAR(dx[static_cast<std::size_t>(r * k + i)], want, 1e-4 * (1 + std::fabs(want)));
    }
  }
}

TEST(GpuQuant, EmbeddingDecodesTheRowsItLooksUp) {
  KILN_REQUIRE_GPU();
  for (const QuantScheme& scheme : every_scheme()) {
    const std::int64_t width = cols_for(scheme);
    const TensorData table = weight_of(scheme, 9, width, 3031);
    const auto q = Tensor<2>::from_data(table, device);
    const std::vector<std::int64_t> ids = {3, 0, 8, 3, 5, 1};
    const auto host_rows = module::embedding(
        Tensor<2>::from_data(table.dequantize(), Device::cpu()),
        Tensor<2, Int>::from_data(TensorData::from_vec(ids, {2, 3}), Device::cpu()));
    for (DType index : {DType::I64, DType::I32}) {
      const auto idx =
          Tensor<2, Int>::from_data(TensorData::from_vec(ids, {2, 3}), device).cast(index);
      const TensorData got = module::embedding(q, idx).into_data();
      EXPECT_EQ(got.shape(), (Shape{2, 3, width}));
      expect_same_floats(got, host_rows.into_data(), name_of(scheme));
    }
    // A transposed table is decoded first: its rows are the weight's columns.
    const auto t = q.transpose();
    const auto idx =
        Tensor<1, Int>::from_data(TensorData::from_vec(std::vector<std::int64_t>{4}), device);
    expect_same_floats(module::embedding(t, idx).into_data(),
                       Tensor<2>::from_data(table.dequantize(), Device::cpu())
                           .transpose()
                           .slice({Slice(4, 5), Slice::all()})
                           .into_data(),
                       name_of(scheme) + " transposed");
  }
  const auto q = Tensor<2>::from_data(weight_of(quant_scheme(QKind::Q8_0), 4, 64, 3032), device);
  const auto none =
      Tensor<1, Int>::from_data(TensorData::from_vec(std::vector<std::int64_t>{}), device);
  EXPECT_EQ(module::embedding(q, none).into_data().shape(), (Shape{0, 64}));
}

}  // namespace gpu_quant

namespace gpu_quant {

// Quantized products launched back to back may overlap (LaunchOrder::Overlapping: the next
// one streams its weight in while the last finishes): a chain whose every x is the product
// before it (one row of x and eight), k in one chunk and in two (the split sums' counters), gives
// the bits it gives with a read after every step (which queues other work between the launches,
// so none overlaps).
TEST(GpuQuant, ProductsLaunchedBackToBackStayInOrder) {
  KILN_REQUIRE_GPU();
  // k 4608: two chunks of 4096 values for one row of x.
  for (const std::int64_t k : {std::int64_t{1024}, std::int64_t{4608}}) {
    for (const QuantScheme& scheme : {quant_scheme(QKind::Q8_0), quant_scheme(QKind::Q4_K)}) {
      const float scale = 1.0f / std::sqrt(static_cast<float>(k));
      std::vector<Tensor<2>> weights;
      for (std::uint32_t s = 0; s < (k > 1024 ? 3u : 6u); ++s) {
        weights.push_back(Tensor<2>::from_data(
            TensorData::from_vec(normal_values(k * k, 3100 + s, scale), {k, k}).quantize(scheme),
            device));
      }
      const std::string what = name_of(scheme) + " k " + std::to_string(k);
      const auto x0 =
          Tensor<2>::from_data(TensorData::from_vec(normal_values(k, 3099), {1, k}), device);
      // One row of x (kiln_quant_matvec) and eight (kiln_quant_round, then kiln_quant_product).
      for (const std::int64_t rows : {std::int64_t{1}, std::int64_t{8}}) {
        const auto x = Tensor<2>::from_data(
            TensorData::from_vec(normal_values(rows * k, 3098), {rows, k}), device);
        Tensor<2> chained = x, stepped = x;
        for (int round = 0; round < 3; ++round) {
          for (const Tensor<2>& w : weights) {
            chained = module::linear(chained, w, std::nullopt);
            stepped =
                Tensor<2>::from_data(module::linear(stepped, w, std::nullopt).into_data(), device);
          }
        }
        expect_same_floats(chained.into_data(), stepped.into_data(),
                           what + " chain of " + std::to_string(rows) + " rows");
      }
    }
  }
}

}  // namespace gpu_quant
