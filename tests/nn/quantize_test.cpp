// nn::quantize (kiln/nn/quantize.h): which parameters become QFloat, the forward pass against the
// same model holding the dequantized weights as floats, the fallback scheme and the report, tied
// weights, training and casting a quantized model, records through GGUF, and the errors.
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/nn/nn.h>
#include <kiln/optim/sgd.h>
#include <kiln/record/gguf.h>

#include <cmath>
#include <filesystem>

#include "support/error_message.h"

namespace kiln {
namespace {

using QKind = QuantScheme::Kind;

struct Tiny {
  nn::Embedding tokens;
  nn::MultiHeadAttention attention;
  nn::LayerNorm norm;
  nn::Linear hidden, head;
  KILN_MODULE(tokens, attention, norm, hidden, head)

  // ids [B, S] -> [B, S, 5]
  Tensor<3> forward(const Tensor<2, Int>& ids) const {
    const Tensor<3> h = tokens.forward(ids);
    const Tensor<3> a = norm.forward(h + attention.forward(h, {.is_causal = true}));
    return head.forward(activation::gelu(hidden.forward(a)));
  }
};

Tiny make_tiny(const Device& device) {
  device.seed(5);
  return Tiny{nn::EmbeddingConfig{11, 64}.init(device),
              nn::MultiHeadAttentionConfig{.embed_dim = 64, .num_heads = 4}.init(device),
              nn::LayerNormConfig{64}.init(device), nn::LinearConfig{64, 96}.init(device),
              nn::LinearConfig{96, 5}.init(device)};
}

Tensor<2, Int> ids(const Device& device) {
  std::vector<std::int64_t> values;
  for (int i = 0; i < 2 * 7; ++i) values.push_back((i * 7 + 3) % 11);
  return Tensor<2, Int>::from_data(TensorData::from_vec(values, {2, 7}), device);
}

// The model with every QFloat parameter replaced by its dequantized values (f32).
Tiny dequantized(const Tiny& quantized) {
  Tiny out = quantized;
  nn::load_record(out, [&] {
    record::TensorMap map = nn::to_record(quantized);
    for (auto& [name, data] : map) {
      if (data.dtype() == DType::QFloat) data = data.dequantize();
    }
    return map;
  }());
  return out;
}

std::map<std::string, DType> dtypes(const Tiny& model) {
  std::map<std::string, DType> out;
  for (const nn::NamedParam& p : nn::named_parameters(model)) out[p.name] = p.value->dtype();
  return out;
}

TEST(Quantize, TwoDimensionalWeightsBecomeQFloat) {
  const Device device = Device::cpu();
  const Tiny q = nn::quantize(make_tiny(device), quant_scheme(QKind::Q8_0));
  const std::map<std::string, DType> got = dtypes(q);
  for (const char* name : {"tokens.weight", "attention.in_proj_weight", "attention.out_proj.weight",
                           "hidden.weight", "head.weight"}) {
    EXPECT_EQ(got.at(name), DType::QFloat) << name;
  }
  for (const char* name : {"attention.in_proj_bias", "attention.out_proj.bias", "norm.weight",
                           "norm.bias", "hidden.bias", "head.bias"}) {
    EXPECT_EQ(got.at(name), DType::F32) << name;
  }
}

// The quantized model computes what the float model holding the dequantized weights computes,
// within the rounding of its activations to int8 blocks (the VNNI products) and f32.
TEST(Quantize, ForwardMatchesTheDequantizedWeights) {
  for (const Device& device : {Device::cpu(), Device::cpu().fused()}) {
    for (QKind kind : {QKind::Q8_0, QKind::Q4_0, QKind::Q5_1}) {
      const Tiny q = nn::quantize(make_tiny(device), quant_scheme(kind));
      const std::vector<double> got = q.forward(ids(device)).into_data().to_f64_vec();
      const std::vector<double> want = dequantized(q).forward(ids(device)).into_data().to_f64_vec();
      ASSERT_EQ(got.size(), want.size());
      double scale = 0;
      for (double v : want) scale = std::max(scale, std::fabs(v));
      for (std::size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], want[i], 2e-2 * scale)
            << device << " " << quant_kind_name(kind) << " " << i;
      }
    }
  }
}

TEST(Quantize, FallbackAndReport) {
  const Device device = Device::cpu();
  std::vector<nn::QuantizedWeight> report;
  // Rows of 64 or 96 values hold no whole 256-value block: Q4_K falls back to Q5_0 for them.
  const Tiny q = nn::quantize(make_tiny(device), quant_scheme(QKind::Q4_K),
                              {.fallback = quant_scheme(QKind::Q5_0), .report = &report});
  ASSERT_EQ(report.size(), 5u);
  EXPECT_EQ(report[0].name, "tokens.weight");
  EXPECT_EQ(report[0].shape, (Shape{11, 64}));
  for (const nn::QuantizedWeight& w : report) {
    ASSERT_TRUE(w.scheme.has_value()) << w.name;
    EXPECT_EQ(w.scheme->kind, QKind::Q5_0) << w.name;
  }
  EXPECT_EQ(nn::to_record(q).at("hidden.weight").scheme().kind, QKind::Q5_0);
  // Without a fallback those weights stay float; int8 rows fit any length.
  const Tiny kept = nn::quantize(make_tiny(device), quant_scheme(QKind::Q4_K), {.report = &report});
  for (const nn::QuantizedWeight& w : report) EXPECT_FALSE(w.scheme.has_value()) << w.name;
  EXPECT_EQ(dtypes(kept).at("hidden.weight"), DType::F32);
  const Tiny int8 = nn::quantize(make_tiny(device), int8_channel_scheme(), {.report = &report});
  for (const nn::QuantizedWeight& w : report) EXPECT_TRUE(w.scheme.has_value()) << w.name;
}

TEST(Quantize, TiedWeightsStayTied) {
  struct Tied {
    nn::Embedding tokens;
    nn::Linear head;
    KILN_MODULE(tokens, head)
  };
  const Device device = Device::cpu();
  Tied model{nn::EmbeddingConfig{8, 32}.init(device), nn::LinearConfig{32, 8, false}.init(device)};
  model.head.weight = nn::Param<2>(model.tokens.weight.val());
  const Tied q = nn::quantize(model, quant_scheme(QKind::Q8_0));
  EXPECT_EQ(q.tokens.weight.primitive(), q.head.weight.primitive());
  EXPECT_EQ(q.head.weight.val().dtype(), DType::QFloat);
}

// A quantized model trains its float parameters; the quantized weights take no gradient. nn::cast
// leaves their blocks alone.
TEST(Quantize, TrainingAndCastingKeepTheBlocks) {
  const Device device = Device::cpu();
  const Tiny q = nn::train(nn::quantize(make_tiny(device), quant_scheme(QKind::Q8_0)));
  EXPECT_FALSE(q.hidden.weight.val().is_require_grad());
  EXPECT_TRUE(q.hidden.bias->val().is_require_grad());
  EXPECT_TRUE(q.norm.weight->val().is_require_grad());
  const Gradients grads = q.forward(ids(device.autodiff())).sum().backward();
  EXPECT_FALSE(q.hidden.weight.val().grad(grads).has_value());
  EXPECT_TRUE(q.hidden.bias->val().grad(grads).has_value());
  EXPECT_TRUE(q.norm.weight->val().grad(grads).has_value());

  const Tiny wide = nn::cast(nn::valid(q), DType::F64);
  EXPECT_EQ(dtypes(wide).at("hidden.weight"), DType::QFloat);
  EXPECT_EQ(dtypes(wide).at("hidden.bias"), DType::F64);
  const Tensor<3> y = wide.forward(ids(device));
  EXPECT_EQ(y.dtype(), DType::F64);
  EXPECT_EQ(y.shape(), (Shape{2, 7, 5}));
}

// safetensors hold no QFloat; GGUF does, and loading takes the blocks back as they are (into a
// quantized model) or dequantized (into a float one).
TEST(Quantize, RecordsThroughGguf) {
  const Device device = Device::cpu();
  const Tiny q = nn::quantize(make_tiny(device), quant_scheme(QKind::Q4_1));
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "kiln_nn_quantize";
  std::filesystem::create_directories(dir);
  test::expect_error_containing<UnsupportedDType>([&] { nn::save(q, dir / "q.safetensors"); },
                                                  {"qfloat"});
  record::save_gguf(dir / "q.gguf", record::GgufFile{nn::to_record(q), {}});
  const record::GgufFile file = record::load_gguf(dir / "q.gguf");
  Tiny again = nn::quantize(make_tiny(device), quant_scheme(QKind::Q8_0));
  nn::load_record(again, file.tensors);
  const record::TensorMap a = nn::to_record(q), b = nn::to_record(again);
  for (const auto& [name, data] : a) {
    const TensorData& other = b.at(name);
    ASSERT_EQ(other.dtype(), data.dtype()) << name;
    EXPECT_TRUE(std::equal(data.bytes().begin(), data.bytes().end(), other.bytes().begin(),
                           other.bytes().end()))
        << name;
  }
  Tiny floats = make_tiny(device);
  nn::load_record(floats, file.tensors);
  EXPECT_EQ(dtypes(floats).at("hidden.weight"), DType::F32);
  EXPECT_EQ(nn::to_record(floats).at("hidden.weight").to_vec<float>(),
            a.at("hidden.weight").dequantize().to_vec<float>());
  std::filesystem::remove_all(dir);
}

TEST(Quantize, Errors) {
  const Tiny model = make_tiny(Device::cpu());
  test::expect_error<UnsupportedOperation>(
      [&] { (void)nn::quantize(model, quant_scheme(QKind::Q2_K)); }, "nn::quantize", {"Q2_K"});
  test::expect_error<InvalidArgument>(
      [&] {
        (void)nn::quantize(model, QuantScheme{QKind::Q8_0, 64});
      },
      "nn::quantize", {"block size 32"});
  test::expect_error<UnsupportedOperation>(
      [&] {
        (void)nn::quantize(model, quant_scheme(QKind::Q4_K),
                           {.fallback = quant_scheme(QKind::Q5_K)});
      },
      "nn::quantize", {"Q5_K"});
}

// Quantization-aware training (nn::prepare_qat): the weights nn::quantize would take are marked,
// stay float and train; the forward pass computes what the quantized model's dequantized weights
// compute, bit for bit; their gradients are that model's gradients (straight through).
TEST(PrepareQat, MarksWhatQuantizeWouldAndForwardsTheDecodedWeights) {
  for (const Device& device : {Device::cpu(), Device::cpu().fused()}) {
    const Tiny model = make_tiny(device);
    const nn::QuantizeOptions fallback{.fallback = quant_scheme(QKind::Q5_0)};
    std::vector<nn::QuantizedWeight> marked, quantized;
    const Tiny qat = nn::prepare_qat(model, quant_scheme(QKind::Q4_K),
                                     {.fallback = fallback.fallback, .report = &marked});
    const Tiny q = nn::quantize(model, quant_scheme(QKind::Q4_K),
                                {.fallback = fallback.fallback, .report = &quantized});
    ASSERT_EQ(marked.size(), quantized.size());
    for (std::size_t i = 0; i < marked.size(); ++i) {
      EXPECT_EQ(marked[i].name, quantized[i].name);
      EXPECT_EQ(marked[i].scheme, quantized[i].scheme) << marked[i].name;
    }
    for (const auto& [name, dtype] : dtypes(qat)) EXPECT_EQ(dtype, DType::F32) << name;
    EXPECT_EQ(qat.hidden.weight.fake_quant(), quant_scheme(QKind::Q5_0));
    EXPECT_FALSE(qat.hidden.bias->fake_quant().has_value());
    EXPECT_FALSE(model.hidden.weight.fake_quant().has_value());  // the module passed in
    EXPECT_EQ(qat.forward(ids(device)).into_data().to_f64_vec(),
              dequantized(q).forward(ids(device)).into_data().to_f64_vec())
        << device;
  }
}

TEST(PrepareQat, GradientsPassStraightThroughToTheFloatWeights) {
  const Device device = Device::cpu();
  const Tiny model = make_tiny(device);
  const QuantScheme q8 = quant_scheme(QKind::Q8_0);
  const Tiny qat = nn::train(nn::prepare_qat(model, q8));
  const Tiny reference = nn::train(dequantized(nn::quantize(model, q8)));
  EXPECT_EQ(qat.head.weight.fake_quant(), q8);  // training keeps the mark
  const Gradients got = qat.forward(ids(device.autodiff())).square().sum().backward();
  const Gradients want = reference.forward(ids(device.autodiff())).square().sum().backward();
  const std::vector<nn::NamedParam> a = nn::named_parameters(qat);
  const std::vector<nn::NamedParam> b = nn::named_parameters(reference);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::optional<Primitive> ga = detail::grad(a[i].value, got);
    const std::optional<Primitive> gb = detail::grad(b[i].value, want);
    ASSERT_TRUE(ga && gb) << a[i].name;
    const std::vector<double> x = detail::into_data(*ga).to_f64_vec();
    const std::vector<double> y = detail::into_data(*gb).to_f64_vec();
    ASSERT_EQ(x.size(), y.size());
    for (std::size_t j = 0; j < x.size(); ++j) {
      ASSERT_NEAR(x[j], y[j], 1e-5 * (1 + std::fabs(y[j]))) << a[i].name << " " << j;
    }
  }
}

// A QAT model trains (its loss falls), and nn::quantize then encodes each weight in the scheme it
// was trained for, giving the model that was trained (within the int8 rounding of the
// activations in the quantized products).
TEST(PrepareQat, TrainsAndQuantizesToTheSchemeItTrainedFor) {
  const Device device = Device::cpu();
  Tiny qat = nn::train(nn::prepare_qat(make_tiny(device), quant_scheme(QKind::Q4_0)));
  optim::Sgd sgd;
  auto loss = [&](const Tiny& m) { return m.forward(ids(device.autodiff())).square().mean(); };
  const double first = loss(qat).into_scalar<double>();
  for (int step = 0; step < 20; ++step) sgd.step(qat, loss(qat).backward(), 0.05);
  EXPECT_LT(loss(qat).into_scalar<double>(), 0.7 * first);
  const Tiny trained = nn::valid(qat);
  EXPECT_EQ(trained.tokens.weight.fake_quant(), quant_scheme(QKind::Q4_0));
  const Tiny q = nn::quantize(trained, quant_scheme(QKind::Q8_0));  // the trained-for Q4_0 wins
  EXPECT_EQ(nn::to_record(q).at("hidden.weight").scheme().kind, QKind::Q4_0);
  EXPECT_FALSE(q.hidden.weight.fake_quant().has_value());
  const std::vector<double> want = trained.forward(ids(device)).into_data().to_f64_vec();
  const std::vector<double> got = q.forward(ids(device)).into_data().to_f64_vec();
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  // Trained weights have larger outliers than fresh ones: x's int8 rounding costs a little more.
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 3e-2 * scale) << i;
}

TEST(PrepareQat, Errors) {
  const Tiny model = make_tiny(Device::cpu());
  test::expect_error<UnsupportedOperation>(
      [&] { (void)nn::prepare_qat(model, quant_scheme(QKind::Q2_K)); }, "nn::prepare_qat",
      {"Q2_K"});
  test::expect_error<InvalidArgument>(
      [&] {
        (void)nn::prepare_qat(model, QuantScheme{QKind::Q8_0, 64});
      },
      "nn::prepare_qat", {"block size 32"});
}

}  // namespace
}  // namespace kiln
