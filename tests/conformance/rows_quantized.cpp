// Conformance rows: quantize and dequantize. quantize is held to the host encoder (itself checked
// against float64 references of the formulas in tests/quant) byte for byte, over every float
// dtype and layout, and to the closed-form bound of rounding to the nearest code; dequantize to
// float64 decodes of random blocks of every GGUF kind. A device that cannot store QFloat refuses
// both with UnsupportedDType.
#include <cmath>
#include <random>

#include "backends/cpu/quant_matvec.h"
#include "backends/cuda/quant.h"
#include "conformance/conformance.h"
#include "kiln/quant.h"
#include "quant/block_reference.h"
#include "support/int8_rounded_x.h"
#include "tensor/common.h"

namespace kiln::conformance {
namespace {

using Kind = QuantScheme::Kind;

bool stores_quantized(const Device& device) {
  return device.dtype_usage(DType::QFloat).contains(DTypeUsage::Storage);
}

Primitive upload_quantized(const TensorData& q, const Device& device) {
  return detail::from_data(q, device, kiln::Kind::Float, q.shape().rank());
}

KILN_CONFORMANCE_ROW(quantize, ({"quantize"})) {
  const std::vector<QuantScheme> schemes = {
      quant_scheme(Kind::Q4_0), quant_scheme(Kind::Q4_1), quant_scheme(Kind::Q5_0),
      quant_scheme(Kind::Q5_1), quant_scheme(Kind::Q8_0), int8_channel_scheme(),
      int8_block_scheme(16),    quant_scheme(Kind::Q4_K), quant_scheme(Kind::Q6_K)};
  if (!stores_quantized(device)) {
    Primitive x = make_primitive(std::vector<double>(32, 1.0), Shape{1, 32}, DType::F32,
                                 Layout::Contiguous, device);
    EXPECT_THROW((void)detail::quantize(x, schemes.front()), UnsupportedDType);
    return;
  }
  std::uint64_t seed = 9100;
  for (DType dtype : kFloatDTypes) {
    for (Layout layout : kLayouts) {
      for (const Shape& shape : {Shape{4, 64}, Shape{2, 3, 32}, Shape{0, 32}, Shape{2, 256}}) {
        const std::vector<double> values = random_values(shape, dtype, seed++, -4, 4);
        const std::vector<double> held = representable(values, dtype);
        std::vector<float> as_f32(held.begin(), held.end());
        const TensorData host = TensorData::from_vec(as_f32, shape);
        for (const QuantScheme& scheme : schemes) {
          // The k-quants' blocks of 256 values need a last dim of 256 (the other kinds take it
          // too).
          if (scheme.block_size == 256 && shape.dims().back() != 256) continue;
          const std::string ctx = context(device, dtype, layout, shape) + " " +
                                  std::string(quant_kind_name(scheme.kind));
          const TensorData got = detail::into_data(
              detail::quantize(make_primitive(values, shape, dtype, layout, device), scheme));
          ASSERT_EQ(got.dtype(), DType::QFloat) << ctx;
          ASSERT_EQ(got.shape(), shape) << ctx;
          ASSERT_EQ(got.scheme(), scheme) << ctx;
          const TensorData want = host.quantize(scheme);
          EXPECT_TRUE(std::equal(got.bytes().begin(), got.bytes().end(), want.bytes().begin(),
                                 want.bytes().end()))
              << "quantize " << ctx;
          // Symmetric schemes: each value within half a code step (max |x| / 127: the int8
          // ones and Q8_0) of its value, or a whole step for Q4_0 and Q5_0 (max |x| / 8 and / 16:
          // the extreme of one sign takes code -8 or -16, and the other's +8 or +16 is clipped
          // to 7 or 15), plus the f16 scale's rounding.
          double step = 0;
          if (scheme.kind == Kind::Q4_0) step = 1.0 / 8;
          if (scheme.kind == Kind::Q5_0) step = 1.0 / 16;
          if (scheme.kind == Kind::Q8_0 || scheme.kind == Kind::Int8Channel ||
              scheme.kind == Kind::Int8Block) {
            step = 0.5 / 127;
          }
          if (step == 0 || shape.num_elements() == 0) continue;
          const std::vector<double> back = got.to_f64_vec();
          const std::int64_t block =
              scheme.kind == Kind::Int8Channel ? shape.dims().back() : scheme.block_size;
          for (std::int64_t b = 0; b < shape.num_elements() / block; ++b) {
            double amax = 0;
            for (std::int64_t j = 0; j < block; ++j)
              amax = std::max(amax, std::fabs(held[b * block + j]));
            for (std::int64_t j = 0; j < block; ++j) {
              const auto i = static_cast<std::size_t>(b * block + j);
              EXPECT_LE(std::fabs(back[i] - held[i]), amax * (step + 2e-3)) << ctx << " at " << i;
            }
          }
        }
      }
    }
  }
}

KILN_CONFORMANCE_ROW(dequantize, ({"dequantize"})) {
  std::mt19937 rng(9200);
  for (Kind kind : {Kind::Q4_0, Kind::Q4_1, Kind::Q5_0, Kind::Q5_1, Kind::Q8_0, Kind::Q2_K,
                    Kind::Q3_K, Kind::Q4_K, Kind::Q5_K, Kind::Q6_K, Kind::Q8_K}) {
    const quant_testing::Layout layout = quant_testing::layout(kind);
    const TensorData q = TensorData::quantized(quant_testing::random_blocks(kind, 4, rng),
                                               Shape{2, 2 * layout.values}, quant_scheme(kind));
    if (!stores_quantized(device)) {
      // (A lazy device, remote, may take the upload and refuse at the op.)
      EXPECT_THROW(
          (void)detail::into_data(detail::dequantize(upload_quantized(q, device), DType::F32)),
          UnsupportedDType);
      return;
    }
    std::vector<double> want;
    for (int b = 0; b < 4; ++b) {
      const std::vector<double> block =
          quant_testing::reference_block(kind, q.bytes().data() + b * layout.bytes);
      want.insert(want.end(), block.begin(), block.end());
    }
    for (DType dtype : kFloatDTypes) {
      const std::string ctx = device.to_string() + " " + std::string(quant_kind_name(kind)) +
                              " to " + std::string(dtype_name(dtype));
      // Blocks decode in f32 (llama.cpp's reference does), also for f64: within f32's rounding.
      const double scale = dtype == DType::F64 ? tolerance(DType::F32) / tolerance(DType::F64) : 1;
      const TensorData got =
          detail::into_data(detail::dequantize(upload_quantized(q, device), dtype));
      expect_close(got, q.shape(), dtype, representable(want, dtype), ctx, scale);
      // The transposed view decodes to the transposed values.
      const TensorData t = detail::into_data(
          detail::dequantize(detail::transpose(upload_quantized(q, device)), dtype));
      std::vector<double> transposed(want.size());
      const std::int64_t cols = 2 * layout.values;
      for (std::int64_t r = 0; r < 2; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
          transposed[static_cast<std::size_t>(c * 2 + r)] =
              want[static_cast<std::size_t>(r * cols + c)];
        }
      }
      expect_close(t, Shape{cols, 2}, dtype, representable(transposed, dtype), ctx + " transposed",
                   scale);
    }
  }
}

// matmul and linear whose weight is a QFloat matrix viewed [k, n] (the transpose of its [n, k]
// blocks, as a model multiplies by it), and embedding from a QFloat table: against float64
// products and lookups of the decoded weight, for every float dtype and layout of x, batches of
// one and several rows, 3-D x, empty x. Within the f32 sums of the magnitudes plus the rounding to
// x's dtype, of x as the product sees it: the CPU's VNNI kernels (every kind they take) and, on
// cuda, products of a few rows of x with a GGUF weight (cuda::quant_rounds_x) round x to int8
// blocks of 32 first (README, quantization), and there the reference takes x so rounded. (A remote
// device is taken to have a CPU server, as in the test process.)
KILN_CONFORMANCE_ROW(quantized_products, ({"matmul", "linear", "embedding"})) {
  if (!stores_quantized(device)) return;
  const std::int64_t k = 256;
  const std::vector<QuantScheme> schemes = {quant_scheme(Kind::Q6_K), quant_scheme(Kind::Q5_1),
                                            int8_channel_scheme()};
  const std::vector<Shape> x_shapes = {{3, k}, {1, k}, {2, 3, k}, {0, k}};
  std::uint64_t seed = 9300;
  for (const QuantScheme& scheme : schemes) {
    for (std::int64_t n : {5, 70}) {
      const std::vector<double> wv = random_values({n, k}, DType::F32, seed++);
      const TensorData w =
          TensorData::from_vec(std::vector<float>(wv.begin(), wv.end()), {n, k}).quantize(scheme);
      const std::vector<double> dense = w.dequantize().to_f64_vec();
      const std::vector<double> bv = random_values({n}, DType::F32, seed++);
      for (DType dtype : kFloatDTypes) {
        for (Layout layout : kLayouts) {
          for (const Shape& xs : x_shapes) {
            const std::vector<double> x = representable(random_values(xs, dtype, seed++), dtype);
            const std::vector<double> b = representable(bv, dtype);
            const std::int64_t rows = xs.num_elements() / k;
            const bool int8_x =
                device.kind() == DeviceKind::Cuda
                    ? cuda::quant_rounds_x(scheme.kind, dtype, rows)
                    : cpu::rounds_x_to_int8(scheme.kind);  // the CPU's, or a remote CPU server's
            const std::vector<double> xr = int8_x ? test::int8_rounded_x(x, k) : x;
            std::vector<std::int64_t> od = xs.to_vector();
            od.back() = n;
            const Shape out(od);
            for (bool with_bias : {false, true}) {
              std::vector<double> want(static_cast<std::size_t>(rows * n));
              std::vector<double> magnitude(want.size());
              for (std::int64_t r = 0; r < rows; ++r) {
                for (std::int64_t j = 0; j < n; ++j) {
                  double sum = with_bias ? b[static_cast<std::size_t>(j)] : 0.0;
                  double size = std::fabs(sum);
                  for (std::int64_t p = 0; p < k; ++p) {
                    const double v = xr[static_cast<std::size_t>(r * k + p)] *
                                     dense[static_cast<std::size_t>(j * k + p)];
                    sum += v;
                    size += std::fabs(v);
                  }
                  want[static_cast<std::size_t>(r * n + j)] = sum;
                  magnitude[static_cast<std::size_t>(r * n + j)] = size;
                }
              }
              const std::string ctx = context(device, dtype, layout, xs) + " " +
                                      std::string(quant_kind_name(scheme.kind)) + " n " +
                                      std::to_string(n) + (with_bias ? " bias" : "");
              const Primitive weight = detail::transpose(upload_quantized(w, device));
              const Primitive xp = make_primitive(x, xs, dtype, layout, device);
              const TensorData got = detail::into_data(
                  with_bias
                      ? detail::linear(xp, weight,
                                       make_primitive(b, {n}, dtype, Layout::Contiguous, device))
                      : detail::matmul(xp, weight));
              ASSERT_EQ(got.dtype(), dtype) << ctx;
              ASSERT_EQ(got.shape(), out) << ctx;
              const std::vector<double> g = got.to_f64_vec();
              const double rounding = dtype == DType::F64 ? 1e-7 : tolerance(dtype);
              int reported = 0;
              for (std::size_t i = 0; i < g.size(); ++i) {
                const double bound = 2e-5 * magnitude[i] + rounding * std::fabs(want[i]) + 1e-12;
                if (!(std::fabs(g[i] - want[i]) <= bound) && reported++ < 3) {
                  ADD_FAILURE() << ctx << " at " << i << ": " << g[i] << " vs " << want[i];
                }
              }
            }
          }
        }
      }
      // The rows of the table that ids names, decoded: the host decoder's values.
      const std::vector<std::int64_t> ids = {n - 1, 0, 2, 0};
      const TensorData got = detail::into_data(detail::embedding(
          upload_quantized(w, device),
          detail::from_data(TensorData::from_vec(ids, {2, 2}), device, kiln::Kind::Int, 2)));
      std::vector<double> rows;
      for (std::int64_t id : ids) {
        rows.insert(rows.end(), dense.begin() + id * k, dense.begin() + (id + 1) * k);
      }
      expect_close(
          got, Shape{2, 2, k}, DType::F32, rows,
          "embedding " + device.to_string() + " " + std::string(quant_kind_name(scheme.kind)));
    }
  }
}

}  // namespace
}  // namespace kiln::conformance
