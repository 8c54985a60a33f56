// Device::set_quant_propagation (src/tensor/generated.cpp, quantized.cpp): under Requantize the
// ops ops.def generates return their result on a QFloat operand encoded in its scheme where the
// result's rows hold whole blocks, bit for bit the host encoder's bytes of the float result;
// every other result (bool, reductions, products, layout ops, tracked results) stays as under
// Dequantize, the default; on the plain, fused, autodiff and fused autodiff CPU devices (remote
// devices: tests/remote/server_test.cpp).
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/quant.h>

#include "support/error_message.h"
#include "tensor/quantized_values.h"

namespace kiln {
namespace {

using Kind = QuantScheme::Kind;
using namespace quantized_values;

// Requantize on the CPU for one test; the switch is process-wide per hardware device.
class RequantizeScope {
 public:
  RequantizeScope() { Device::cpu().set_quant_propagation(QuantPropagation::Requantize); }
  ~RequantizeScope() { Device::cpu().set_quant_propagation(QuantPropagation::Dequantize); }
};

bool same_bytes(const TensorData& a, const TensorData& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.scheme() == b.scheme() &&
         std::equal(a.bytes().begin(), a.bytes().end(), b.bytes().begin(), b.bytes().end());
}

TEST(QuantPropagation, DequantizeIsTheDefaultAndTheSwitchIsPerHardwareDevice) {
  EXPECT_EQ(Device::cpu().quant_propagation(), QuantPropagation::Dequantize);
  const auto q = Tensor<2>::from_data(TensorData::from_vec(normal(64, 1), {2, 32}), Device::cpu())
                     .quantize(quant_scheme(Kind::Q8_0));
  EXPECT_EQ((q * 2.0).dtype(), DType::F32);
  const RequantizeScope scope;
  for (const Device& device : devices()) {
    EXPECT_EQ(device.quant_propagation(), QuantPropagation::Requantize) << device;
  }
  EXPECT_EQ((q * 2.0).dtype(), DType::QFloat);
}

// Elementwise results and results along a dim of a QFloat operand are the host encoder's blocks
// of the float result (computed here from the dequantized operand, on the host).
TEST(QuantPropagation, RequantizedResultsAreTheEncodedFloatResults) {
  const RequantizeScope scope;
  const Shape shape{3, 64};
  const std::vector<float> values = normal(shape.num_elements(), 2);
  const std::vector<float> other = normal(shape.num_elements(), 3);
  for (const QuantScheme& scheme :
       {quant_scheme(Kind::Q8_0), quant_scheme(Kind::Q4_0), int8_channel_scheme()}) {
    const TensorData blocks = TensorData::from_vec(values, shape).quantize(scheme);
    const std::vector<float> decoded = blocks.dequantize().to_vec<float>();
    auto encoded = [&](auto f) {
      std::vector<float> out(decoded.size());
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = f(i);
      return TensorData::from_vec(out, shape).quantize(scheme);
    };
    for (const Device& device : devices()) {
      const auto q = Tensor<2>::from_data(blocks, device);
      const auto x = Tensor<2>::from_data(TensorData::from_vec(other, shape), device);
      const std::string context =
          device.to_string() + " " + std::string(quant_kind_name(scheme.kind));
      const TensorData scaled = (q * 2.0).into_data();
      ASSERT_EQ(scaled.dtype(), DType::QFloat) << context;
      EXPECT_TRUE(same_bytes(scaled, encoded([&](std::size_t i) { return decoded[i] * 2.0f; })))
          << context;
      EXPECT_TRUE(same_bytes((x + q).into_data(),
                             encoded([&](std::size_t i) { return other[i] + decoded[i]; })))
          << context;
      EXPECT_TRUE(same_bytes(q.abs().into_data(),
                             encoded([&](std::size_t i) { return std::fabs(decoded[i]); })))
          << context;
      // Along a dim: cumsum keeps the rows' length; its blocks decode to the running sums within
      // half a step of the coarsest scheme here (Q4_0: an eighth of a block's largest value).
      const TensorData sums = q.cumsum(1).into_data();
      ASSERT_EQ(sums.dtype(), DType::QFloat) << context;
      const std::vector<double> got = reference_values(sums);
      for (std::int64_t r = 0; r < shape[0]; ++r) {
        std::vector<double> want;
        double running = 0, largest = 0;
        for (std::int64_t c = 0; c < shape[1]; ++c) {
          running += decoded[static_cast<std::size_t>(r * shape[1] + c)];
          want.push_back(running);
          largest = std::max(largest, std::fabs(running));
        }
        for (std::int64_t c = 0; c < shape[1]; ++c) {
          EXPECT_NEAR(got[static_cast<std::size_t>(r * shape[1] + c)],
                      want[static_cast<std::size_t>(c)], largest / 8 + 1e-6)
              << context << " row " << r << " col " << c;
        }
      }
    }
  }
}

// Results that cannot hold the operand's blocks, and ops outside the generated forms, stay as
// under Dequantize.
TEST(QuantPropagation, OtherResultsStayAsTheyWere) {
  const RequantizeScope scope;
  const Shape shape{4, 32};
  for (const Device& device : devices()) {
    const auto q = Tensor<2>::from_data(TensorData::from_vec(normal(128, 4), shape), device)
                       .quantize(quant_scheme(Kind::Q8_0));
    const auto x = Tensor<2>::from_data(TensorData::from_vec(normal(128, 5), shape), device);
    EXPECT_EQ(q.greater_elem(0.0).dtype(), DType::Bool) << device;        // a comparison
    EXPECT_EQ(q.sum().dtype(), DType::F32) << device;                     // shape [1]
    EXPECT_EQ(q.sum_dim(1).dtype(), DType::F32) << device;                // rows of 1
    EXPECT_EQ(x.matmul(q.transpose()).dtype(), DType::F32) << device;     // a product: x's dtype
    EXPECT_EQ(Tensor<2>::cat({q, x}, 0).dtype(), DType::F32) << device;   // not a generated form
    EXPECT_EQ(q.slice({{0, 4}, {0, 16}}).dtype(), DType::F32) << device;  // part of each row
    EXPECT_EQ(q.transpose().dtype(), DType::QFloat) << device;            // a view, as always
  }
  // A tracked result keeps its gradient: it stays float.
  const Device tracked = Device::cpu().autodiff();
  const auto q = Tensor<2>::from_data(TensorData::from_vec(normal(128, 6), shape), tracked)
                     .quantize(quant_scheme(Kind::Q8_0));
  const auto w =
      Tensor<2>::from_data(TensorData::from_vec(normal(128, 7), shape), tracked).require_grad();
  const Tensor<2> y = q * w;
  EXPECT_EQ(y.dtype(), DType::F32);
  EXPECT_TRUE(w.grad(y.sum().backward()).has_value());
}

// A result no block can hold (NaN, infinity) is refused as quantize refuses it.
TEST(QuantPropagation, NonFiniteResultsAreRefused) {
  const RequantizeScope scope;
  const auto q = Tensor<2>::from_data(TensorData::from_vec(normal(32, 8), {1, 32}), Device::cpu())
                     .quantize(quant_scheme(Kind::Q8_0));
  test::expect_error<InvalidArgument>([&] { (void)(q / 0.0).into_data(); }, "quantize", {"inf"});
}

}  // namespace
}  // namespace kiln
