// nn::save / nn::load: module round trips under dotted names, mode and device kept, dtype
// conversion, and the strict checks (missing, unexpected, wrong shape) that leave the module
// untouched when they fail.
#include <gtest/gtest.h>
#include <kiln/autodiff.h>
#include <kiln/kiln.h>
#include <kiln/nn/linear.h>
#include <kiln/nn/record.h>

#include "record/record_test_util.h"
#include "support/devices.h"

namespace kiln::nn {
namespace {

using record::testing::ScratchDir;

using kiln::test::kCpu;

struct Block {
  Linear fc1, fc2;
  Buffer<1> running;
  KILN_MODULE(fc1, fc2, running)
};

struct Net {
  std::vector<Block> layers;
  std::optional<Linear> head;
  KILN_MODULE(layers, head)
};

Net make_net(std::uint64_t seed) {
  kCpu.seed(seed);
  Net net;
  for (int i = 0; i < 2; ++i) {
    net.layers.push_back(
        Block{LinearConfig{4, 3}.init(kCpu), LinearConfig{3, 2, false}.init(kCpu),
              Buffer<1>(Tensor<1>::random({2}, Distribution::uniform(0, 1), kCpu))});
  }
  net.head = LinearConfig{2, 1}.init(kCpu);
  return net;
}

std::map<std::string, std::vector<double>> values_of(const auto& module) {
  std::map<std::string, std::vector<double>> out;
  for (const NamedParam& p : named_parameters(module)) {
    out[p.name] = kiln::detail::into_data(p.value).to_f64_vec();
  }
  return out;
}

TEST(ModuleRecord, LinearRoundTripsUnderPyTorchNames) {
  ScratchDir dir;
  kCpu.seed(1);
  const Linear saved = LinearConfig{5, 3}.init(kCpu);
  save(saved, dir / "linear.safetensors");
  const record::TensorMap file = record::load_safetensors(dir / "linear.safetensors");
  ASSERT_EQ(file.size(), 2u);
  EXPECT_EQ(file.at("weight").shape(), (Shape{3, 5}));  // [out, in], as PyTorch stores it
  EXPECT_EQ(file.at("bias").shape(), (Shape{3}));
  EXPECT_EQ(file.at("weight").dtype(), DType::F32);

  kCpu.seed(2);
  Linear loaded = LinearConfig{5, 3}.init(kCpu);
  ASSERT_NE(values_of(loaded), values_of(saved));  // different initial values
  load(loaded, dir / "linear.safetensors");
  EXPECT_EQ(values_of(loaded), values_of(saved));
}

TEST(ModuleRecord, NestedModuleRoundTripsWithDottedNamesAndBuffers) {
  ScratchDir dir;
  const Net saved = make_net(3);
  save(saved, dir / "net.safetensors", {{"epoch", "7"}});
  const record::SafetensorsFile file =
      record::load_safetensors_with_metadata(dir / "net.safetensors");
  EXPECT_EQ(file.metadata, (record::Metadata{{"epoch", "7"}}));
  std::vector<std::string> names;
  for (const auto& [name, data] : file.tensors) names.push_back(name);
  const std::vector<std::string> expected = {
      "head.bias",           "head.weight",      "layers.0.fc1.bias", "layers.0.fc1.weight",
      "layers.0.fc2.weight", "layers.0.running", "layers.1.fc1.bias", "layers.1.fc1.weight",
      "layers.1.fc2.weight", "layers.1.running"};
  EXPECT_EQ(names, expected);

  Net loaded = make_net(4);
  load(loaded, dir / "net.safetensors");
  EXPECT_EQ(values_of(loaded), values_of(saved));
  // The forward pass agrees too.
  const auto x =
      Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{1, -1, 2, 0.5f}, {1, 4}), kCpu);
  EXPECT_EQ(saved.head->forward(saved.layers[0].fc1.forward(x).slice({{0, 1}, {0, 2}}))
                .into_data()
                .to_vec<float>(),
            loaded.head->forward(loaded.layers[0].fc1.forward(x).slice({{0, 1}, {0, 2}}))
                .into_data()
                .to_vec<float>());
}

TEST(ModuleRecord, LoadKeepsTrainingModeAndTracking) {
  ScratchDir dir;
  const Net saved = make_net(5);
  save(saved, dir / "net.safetensors");

  Net training = train(make_net(6));
  load(training, dir / "net.safetensors");
  EXPECT_EQ(values_of(training), values_of(saved));
  for (const NamedParam& p : named_parameters(training)) {
    EXPECT_TRUE(p.value->device().is_autodiff()) << p.name;
    EXPECT_EQ(kiln::detail::is_require_grad(p.value), p.trainable) << p.name;
  }
  // Gradients reach the loaded parameters: d sum(3 W) / dW = 3.
  const Tensor<2> w = training.layers[0].fc1.weight.val();
  Gradients g = (w * 3.0).sum().backward();
  ASSERT_TRUE(w.grad(g).has_value());
  for (double d : w.grad(g)->into_data().to_f64_vec()) EXPECT_EQ(d, 3.0);

  Net validating = valid(make_net(7));
  load(validating, dir / "net.safetensors");
  for (const NamedParam& p : named_parameters(validating)) {
    EXPECT_EQ(p.value->device(), kCpu) << p.name;
    EXPECT_FALSE(kiln::detail::is_require_grad(p.value)) << p.name;
  }
}

TEST(ModuleRecord, ConvertsTheFileDTypeToTheParameterDType) {
  kCpu.seed(8);
  const Linear source = LinearConfig{4, 2}.init(kCpu);
  // An f16 record loads into an f32 model exactly (every f16 is an f32).
  record::TensorMap half_record;
  for (auto& [name, data] : to_record(source)) half_record[name] = data.convert(DType::F16);
  Linear model = LinearConfig{4, 2}.init(kCpu);
  load_record(model, half_record);
  EXPECT_EQ(model.weight.val().dtype(), DType::F32);
  EXPECT_EQ(model.weight.val().into_data().to_f64_vec(), half_record.at("weight").to_f64_vec());

  // An f32 record into an f16 model rounds each value to nearest even.
  Linear half_model = cast(model, DType::F16);
  const record::TensorMap full = to_record(source);
  load_record(half_model, full);
  EXPECT_EQ(half_model.weight.val().dtype(), DType::F16);
  const std::vector<float> w = full.at("weight").to_vec<float>();
  const std::vector<half> got = half_model.weight.val().into_data().to_vec<half>();
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_EQ(got[i].bits, float_to_f16_bits(w[i])) << i;
}

TEST(ModuleRecord, MissingParametersAreListed) {
  Linear model = LinearConfig{3, 2}.init(kCpu);
  const auto before = values_of(model);
  record::TensorMap partial = to_record(LinearConfig{3, 2}.init(kCpu));
  partial.erase("bias");
  try {
    load_record(model, partial);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("[nn::load] record: 1 parameter(s) of the module are "
                                         "not in the record: 'bias'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(values_of(model), before);
}

TEST(ModuleRecord, UnexpectedNamesAreRejectedUnlessAllowed) {
  ScratchDir dir;
  const Net big = make_net(9);
  save(big, dir / "net.safetensors");
  // Load one block out of the whole network's file: its names do not match at the top level,
  // so build a record with the block's names plus extras.
  record::TensorMap record = to_record(big.layers[0]);
  record["extra.weight"] = TensorData::from_vec(std::vector<float>{1});
  record["another"] = TensorData::from_vec(std::vector<float>{2});
  Block block = make_net(10).layers[0];
  const auto before = values_of(block);
  try {
    load_record(block, record);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("2 name(s) in the record are not in the module: 'another', "
                           "'extra.weight'"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("allow_unexpected"), std::string::npos) << message;
  }
  EXPECT_EQ(values_of(block), before);
  load_record(block, record, {.allow_unexpected = true});
  EXPECT_EQ(values_of(block), values_of(big.layers[0]));

  // Through a file: the whole network's file into one Linear is refused, naming the extras.
  Linear head = LinearConfig{2, 1}.init(kCpu);
  try {
    load(head, dir / "net.safetensors");
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("[nn::load] " + (dir / "net.safetensors").string()), std::string::npos)
        << message;
    EXPECT_NE(message.find("parameter(s) of the module are not in the record: 'weight', 'bias'"),
              std::string::npos)
        << message;
  }
}

// LoadOptions::prefix reads a sub-tree of a bigger checkpoint (names outside it are not
// unexpected), rename maps the file's names to the module's (empty: skipped), and a missing name
// is reported with the nearest name the file has.
TEST(ModuleRecord, PrefixAndRenameMapTheFileNamesToTheModule) {
  const Net big = make_net(11);
  const record::TensorMap whole = to_record(big);
  Block block = make_net(12).layers[0];
  load_record(block, whole, {.prefix = "layers.1."});
  EXPECT_EQ(values_of(block), values_of(big.layers[1]));

  // Names as another framework spells them, renamed to the module's.
  record::TensorMap foreign;
  for (const auto& [name, data] : to_record(big.layers[0])) foreign["model." + name + ".v1"] = data;
  foreign["model.unused"] = TensorData::from_vec(std::vector<float>{1});
  Block renamed = make_net(13).layers[0];
  const auto strip_version = [](std::string_view name) {
    return name == "unused" ? std::string() : std::string(name.substr(0, name.size() - 3));
  };
  load_record(renamed, foreign, {.prefix = "model.", .rename = strip_version});
  EXPECT_EQ(values_of(renamed), values_of(big.layers[0]));

  // Two names of the file that load as one are refused, naming both; nothing changes.
  const auto before = values_of(renamed);
  try {
    load_record(renamed, foreign,
                {.prefix = "model.", .rename = [](std::string_view) { return std::string("x"); }});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("' both load as 'x'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(values_of(renamed), before);

  // Without the prefix the module's names are missing: the message shows the file's nearest.
  try {
    load_record(block, whole);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("closest names in the record: 'fc1.weight' ~ 'layers.0.fc1.weight'"),
              std::string::npos)
        << message;
  }
  try {
    load_record(block, record::TensorMap{});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("the record is empty"), std::string::npos) << e.what();
  }
}

TEST(ModuleRecord, ShapeMismatchNamesTheParameter) {
  ScratchDir dir;
  save(make_net(11), dir / "net.safetensors");
  Net wider = make_net(12);
  wider.layers[1].fc1 = LinearConfig{4, 5}.init(kCpu);  // [5, 4] instead of [3, 4]
  wider.layers[1].fc2 = LinearConfig{5, 2, false}.init(kCpu);
  const auto before = values_of(wider);
  try {
    load(wider, dir / "net.safetensors");
    FAIL() << "expected ShapeMismatch";
  } catch (const ShapeMismatch& e) {
    const std::string message = e.what();
    EXPECT_NE(
        message.find("'layers.1.fc1.weight' is [5, 4] in the module but [3, 4] in the record"),
        std::string::npos)
        << message;
    EXPECT_NE(message.find("'layers.1.fc1.bias' is [5] in the module but [3] in the record"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("'layers.1.fc2.weight' is [2, 5] in the module but [2, 3]"),
              std::string::npos)
        << message;
  }
  EXPECT_EQ(values_of(wider), before);  // nothing was replaced
}

}  // namespace
}  // namespace kiln::nn
