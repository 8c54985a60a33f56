// BertModel against Hugging Face transformers: tiny random models saved by transformers
// (tests/nn/fixtures/make_bert_fixtures.py) load as they are, and their outputs for inputs with
// padding and token types equal what transformers computed in float64.
#include <kiln/nn/bert.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "nn/layer_test_util.h"

namespace kiln::nn {
namespace {

using testing::kCpu;

const std::filesystem::path kFixtures = std::filesystem::path(KILN_TEST_SOURCE_DIR) / "nn/fixtures";

struct Expected {
  nlohmann::json json;
  Shape shape;
  Tensor<2, Int> ints(const char* name, const Device& device = kCpu) const {
    return Tensor<2, Int>::from_data(
        TensorData::from_vec(json.at(name).get<std::vector<std::int64_t>>(), shape), device);
  }
  std::vector<double> values(const char* name) const {
    return json.at(name).get<std::vector<double>>();
  }
  BertInputs inputs(const Device& device = kCpu) const {
    return {.attention_mask = ints("attention_mask", device),
            .token_type_ids = ints("token_type_ids", device)};
  }
};

Expected expected() {
  std::ifstream in(kFixtures / "bert_expected.json");
  Expected e{nlohmann::json::parse(in), {}};
  e.shape = Shape(e.json.at("shape").get<std::vector<std::int64_t>>());
  return e;
}

TEST(NnBert, TransformersBertModelLoadsAndAgreesInFloat64) {
  const Expected e = expected();
  const BertModel bert =
      cast(BertModel::from_pretrained(kFixtures / "tiny_bert", kCpu), DType::F64);
  ASSERT_TRUE(bert.pooler.has_value());
  const Tensor<3> hidden = bert.forward(e.ints("input_ids"), e.inputs());
  EXPECT_EQ(hidden.shape(), (Shape{2, 7, 32}));
  testing::expect_near(testing::read(hidden), e.values("last_hidden_state"), 1e-10, "hidden");
  testing::expect_near(testing::read(bert.pool(hidden)), e.values("pooler_output"), 1e-10,
                       "pooler");
}

// On the default device (cuda:0 on a GPU machine), from the file's path.
TEST(NnBert, Float32ModelAgreesWithTheFloat64Reference) {
  const Expected e = expected();
  const Device device = Device::default_device();
  const BertModel bert = BertModel::from_pretrained(kFixtures / "tiny_bert" / "model.safetensors");
  const Tensor<3> hidden = bert.forward(e.ints("input_ids", device), e.inputs(device));
  EXPECT_EQ(hidden.dtype(), DType::F32);
  testing::expect_near(testing::read(hidden), e.values("last_hidden_state"), 2e-5, "f32 hidden");
}

// A BertForMaskedLM checkpoint: the encoder under "bert.", the heads ignored, no pooler, and the
// tanh form of gelu (gelu_new).
TEST(NnBert, EncoderOfAModelWithHeadsLoads) {
  const Expected e = expected();
  const BertModel bert =
      cast(BertModel::from_pretrained(kFixtures / "tiny_bert_mlm", kCpu), DType::F64);
  EXPECT_FALSE(bert.pooler.has_value());
  EXPECT_EQ(bert.activation, BertActivation::GeluTanh);
  testing::expect_near(testing::read(bert.forward(e.ints("input_ids"), e.inputs())),
                       e.values("mlm_last_hidden_state"), 1e-10, "mlm hidden");
  EXPECT_THROW((void)bert.pool(Tensor<3>::zeros({1, 2, 32}, kCpu)), InvalidArgument);
}

// Without a mask every token attends to every other: padding then changes the outputs of the
// real tokens, and the mask takes them back to the unpadded sequence's.
TEST(NnBert, PaddingMaskedEqualsTheUnpaddedSequence) {
  const BertModel bert =
      cast(BertModel::from_pretrained(kFixtures / "tiny_bert", kCpu), DType::F64);
  const auto ids = [](std::vector<std::int64_t> v) {
    const auto n = static_cast<std::int64_t>(v.size());
    return Tensor<2, Int>::from_data(TensorData::from_vec(std::move(v), Shape{1, n}), kCpu);
  };
  const std::vector<double> alone = testing::read(bert.forward(ids({2, 40, 41, 3})));
  const Tensor<3> padded =
      bert.forward(ids({2, 40, 41, 3, 0, 0}), {.attention_mask = ids({1, 1, 1, 1, 0, 0})});
  testing::expect_near(testing::read(padded.narrow(1, 0, 4)), alone, 1e-12, "masked");
  const std::vector<double> unmasked =
      testing::read(bert.forward(ids({2, 40, 41, 3, 0, 0})).narrow(1, 0, 4));
  double largest = 0;
  for (std::size_t i = 0; i < alone.size(); ++i) {
    largest = std::max(largest, std::abs(unmasked[i] - alone[i]));
  }
  EXPECT_GT(largest, 1e-3);
}

// skip_padding: the attended tokens' states are the full forward's, the padding's rows zeros;
// without a mask it changes nothing.
TEST(NnBert, SkippingPaddingKeepsTheAttendedTokensStates) {
  const Expected e = expected();
  const BertModel bert =
      cast(BertModel::from_pretrained(kFixtures / "tiny_bert", kCpu), DType::F64);
  const Tensor<2, Int> ids = e.ints("input_ids");
  BertInputs inputs = e.inputs();
  const std::vector<double> full = testing::read(bert.forward(ids, inputs));
  const std::vector<std::int64_t> mask =
      e.json.at("attention_mask").get<std::vector<std::int64_t>>();
  ASSERT_NE(std::count(mask.begin(), mask.end(), 0), 0) << "the fixture has no padding";
  inputs.skip_padding = true;
  const Tensor<3> skipped = bert.forward(ids, inputs);
  ASSERT_EQ(skipped.shape(), (Shape{2, 7, 32}));
  const std::vector<double> got = testing::read(skipped);
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool attended = mask[i / 32] != 0;
    EXPECT_NEAR(got[i], attended ? full[i] : 0.0, 1e-12) << "element " << i;
  }
  const std::vector<double> unmasked = testing::read(bert.forward(ids));
  testing::expect_near(testing::read(bert.forward(ids, {.skip_padding = true})), unmasked, 0,
                       "no mask");
  // Every token padding: nothing to run, all zeros.
  const Tensor<2, Int> none = Tensor<2, Int>::zeros(ids.shape(), kCpu);
  const Tensor<3> empty = bert.forward(ids, {.attention_mask = none, .skip_padding = true});
  EXPECT_EQ(empty.shape(), (Shape{2, 7, 32}));
  EXPECT_EQ(testing::read(empty.abs().sum())[0], 0.0);
}

TEST(NnBert, ParameterNamesAreTransformers) {
  const BertModel bert = BertConfig{.vocab_size = 11,
                                    .hidden_size = 8,
                                    .num_hidden_layers = 1,
                                    .num_attention_heads = 2,
                                    .intermediate_size = 12,
                                    .max_position_embeddings = 6}
                             .init(kCpu);
  std::vector<std::string> names;
  for (const NamedParam& p : named_parameters(bert)) names.push_back(p.name);
  const std::vector<std::string> want = {"embeddings.word_embeddings.weight",
                                         "embeddings.position_embeddings.weight",
                                         "embeddings.token_type_embeddings.weight",
                                         "embeddings.LayerNorm.weight",
                                         "embeddings.LayerNorm.bias",
                                         "encoder.layer.0.attention.self.query.weight",
                                         "encoder.layer.0.attention.self.query.bias",
                                         "encoder.layer.0.attention.self.key.weight",
                                         "encoder.layer.0.attention.self.key.bias",
                                         "encoder.layer.0.attention.self.value.weight",
                                         "encoder.layer.0.attention.self.value.bias",
                                         "encoder.layer.0.attention.output.dense.weight",
                                         "encoder.layer.0.attention.output.dense.bias",
                                         "encoder.layer.0.attention.output.LayerNorm.weight",
                                         "encoder.layer.0.attention.output.LayerNorm.bias",
                                         "encoder.layer.0.intermediate.dense.weight",
                                         "encoder.layer.0.intermediate.dense.bias",
                                         "encoder.layer.0.output.dense.weight",
                                         "encoder.layer.0.output.dense.bias",
                                         "encoder.layer.0.output.LayerNorm.weight",
                                         "encoder.layer.0.output.LayerNorm.bias",
                                         "pooler.dense.weight",
                                         "pooler.dense.bias"};
  EXPECT_EQ(names, want);
}

TEST(NnBert, BadInputsAndFilesAreNamed) {
  const BertModel bert = BertModel::from_pretrained(kFixtures / "tiny_bert", kCpu);
  const auto zeros = [](std::int64_t b, std::int64_t s) {
    return Tensor<2, Int>::zeros({b, s}, kCpu);
  };
  // 17 tokens where max_position_embeddings is 16.
  EXPECT_THROW((void)bert.forward(zeros(1, 17)), InvalidArgument);
  EXPECT_THROW((void)bert.forward(zeros(2, 5), {.attention_mask = zeros(2, 4)}), ShapeMismatch);
  EXPECT_THROW((void)bert.forward(zeros(2, 5), {.token_type_ids = zeros(1, 5)}), ShapeMismatch);

  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "kiln_bert_bad_config";
  std::filesystem::create_directories(dir);
  const auto config_with = [&](const std::string& text) {
    std::ofstream(dir / "config.json") << text;
    return dir / "config.json";
  };
  EXPECT_THROW(BertConfig::from_json_file(config_with(R"({"model_type": "roberta"})")),
               InvalidArgument);
  EXPECT_THROW(BertConfig::from_json_file(config_with(R"({"hidden_act": "mish"})")),
               InvalidArgument);
  EXPECT_THROW(BertConfig::from_json_file(config_with(R"({"hidden_size": "big"})")),
               InvalidArgument);
  EXPECT_THROW(BertConfig::from_json_file(config_with("{not json")), InvalidArgument);
  EXPECT_THROW(BertConfig::from_json_file(dir / "absent.json"), InvalidArgument);
  try {
    config_with(R"({"hidden_act": "mish"})");
    (void)BertConfig::from_json_file(dir / "config.json");
    FAIL() << "no exception";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("'mish'"), std::string::npos) << error.what();
  }
  // A directory without model.safetensors.
  config_with("{}");
  EXPECT_THROW((void)BertModel::from_pretrained(dir, kCpu), InvalidArgument);
  std::filesystem::remove_all(dir);
  EXPECT_THROW((void)(BertConfig{.hidden_size = 10, .num_attention_heads = 3}.init(kCpu)),
               InvalidArgument);
}

TEST(NnBert, GeluTanhIsTheTanhForm) {
  const std::vector<double> x = {-6.0, -2.5, -1.0, -0.3, 0.0, 0.2, 1.0, 3.0, 7.5};
  const std::vector<double> got =
      testing::read(activation::gelu_tanh(testing::tensor<1>(x, Shape{9}).cast(DType::F64)));
  std::vector<double> want;
  for (double v : x) {
    want.push_back(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
  }
  testing::expect_near(got, want, 1e-14);
}

}  // namespace
}  // namespace kiln::nn
