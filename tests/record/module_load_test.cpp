// Loading pretrained modules: Int and Bool buffers saved and loaded in their dtype, entries of the
// wrong kind refused naming the slot and both dtypes, KILN_NAMED names in files, and
// nn::from_record, which builds without drawing and loads strictly.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <map>
#include <string>
#include <vector>

#include "record/record_test_util.h"
#include "support/devices.h"
#include "support/embeddings_module.h"
#include "support/error_message.h"

namespace kiln::nn {
namespace {

using namespace kiln::test;  // kCpu, the Embeddings module, next_draws, error checks
using record::testing::ScratchDir;

static_assert(ModuleConfig<EmbeddingsConfig>);
static_assert(ModuleConfig<LinearConfig>);

// Random values everywhere (fixed seed), integers and the mask included.
Embeddings random_embeddings(std::uint64_t seed) {
  kCpu.seed(seed);
  Embeddings m = EmbeddingsConfig{}.init(kCpu);
  m.layer_norm.weight = Tensor<1>::random({4}, Distribution::uniform(-1, 1), kCpu);
  m.layer_norm.bias = Tensor<1>::random({4}, Distribution::uniform(-1, 1), kCpu);
  m.position_ids = Tensor<2, Int>::random({1, 6}, Distribution::uniform(0, 512), kCpu);
  m.mask = Tensor<1>::random({4}, Distribution::uniform(0, 1), kCpu).greater_elem(0.5);
  m.running = Tensor<1>::random({4}, Distribution::uniform(0, 1), kCpu);
  return m;
}

// Every slot's dtype, shape and values (as f64; integers below 2^53 are exact).
struct Contents {
  DType dtype;
  Shape shape;
  std::vector<double> values;
  bool operator==(const Contents&) const = default;
};
std::map<std::string, Contents> contents_of(const auto& module) {
  std::map<std::string, Contents> out;
  for (const NamedParam& p : named_parameters(module)) {
    const TensorData data = kiln::detail::into_data(p.value);
    out[p.name] = {data.dtype(), data.shape(), data.convert(DType::F64).to_f64_vec()};
  }
  return out;
}

TEST(ModuleLoad, IntAndBoolBuffersAreSavedAndLoadedInTheirDType) {
  ScratchDir dir;
  const Embeddings saved = random_embeddings(1);
  save(saved, dir / "embeddings.safetensors");
  const record::TensorMap file = record::load_safetensors(dir / "embeddings.safetensors");
  EXPECT_EQ(file.at("position_ids").dtype(), DType::I64);
  EXPECT_EQ(file.at("position_ids").shape(), (Shape{1, 6}));
  EXPECT_EQ(file.at("position_ids").to_vec<std::int64_t>(),
            saved.position_ids.val().into_data().to_vec<std::int64_t>());
  EXPECT_EQ(file.at("mask").dtype(), DType::Bool);
  EXPECT_EQ(file.at("running").dtype(), DType::F32);

  Embeddings loaded = random_embeddings(2);
  ASSERT_NE(contents_of(loaded), contents_of(saved));
  load(loaded, dir / "embeddings.safetensors");
  EXPECT_EQ(contents_of(loaded), contents_of(saved));

  // An Int buffer takes the file's integer dtype: an i32 entry loads as i32, values kept.
  record::TensorMap narrow = to_record(saved);
  narrow["position_ids"] = narrow.at("position_ids").convert(DType::I32);
  load_record(loaded, narrow);
  EXPECT_EQ(loaded.position_ids.val().dtype(), DType::I32);
  EXPECT_EQ(loaded.position_ids.val().into_data().to_vec<std::int32_t>(),
            narrow.at("position_ids").to_vec<std::int32_t>());
  // Float slots still convert between float dtypes (f64 entries into f32 slots).
  record::TensorMap wide = to_record(saved);
  wide["running"] = wide.at("running").convert(DType::F64);
  wide["dense.weight"] = wide.at("dense.weight").convert(DType::F64);
  load_record(loaded, wide);
  EXPECT_EQ(contents_of(loaded), contents_of(saved));
}

TEST(ModuleLoad, AnEntryOfAnotherKindNamesTheSlotAndBothDTypes) {
  const record::TensorMap good = to_record(random_embeddings(3));
  Embeddings module = random_embeddings(4);
  const auto before = contents_of(module);
  struct Case {
    std::string name;
    TensorData entry;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"position_ids", good.at("position_ids").convert(DType::F32),
       "record: entries of another kind: buffer 'position_ids' holds int values (i64) but the "
       "record's entry is f32"},
      {"running", TensorData::from_vec(std::vector<std::int64_t>{1, 2, 3, 4}),
       "buffer 'running' holds float values (f32) but the record's entry is i64"},
      {"dense.weight", good.at("dense.weight").convert(DType::I32),
       "parameter 'dense.weight' holds float values (f32) but the record's entry is i32"},
      {"position_ids", good.at("mask"),
       "buffer 'position_ids' holds int values (i64) but the record's entry is bool"},
      {"mask", good.at("mask").convert(DType::U8),
       "buffer 'mask' holds bool values (bool) but the record's entry is u8"},
  };
  for (const Case& c : cases) {
    record::TensorMap changed = good;
    changed[c.name] = c.entry;
    expect_error<DTypeMismatch>([&] { load_record(module, changed); }, "nn::load", {c.expected});
  }
  EXPECT_EQ(contents_of(module), before);  // nothing was replaced

  // Under a prefix the message gives the entry's own name too.
  record::TensorMap prefixed;
  for (const auto& [name, data] : good) prefixed["bert." + name] = data;
  prefixed["bert.position_ids"] = good.at("position_ids").convert(DType::F16);
  expect_error<DTypeMismatch>([&] { load_record(module, prefixed, {.prefix = "bert."}); },
                              "nn::load",
                              {"buffer 'position_ids' holds int values (i64) but the record's "
                               "entry 'bert.position_ids' is f16"});
  EXPECT_EQ(contents_of(module), before);
}

TEST(ModuleLoad, NamedMembersRoundTripUnderTheirCheckpointNames) {
  ScratchDir dir;
  const Embeddings saved = random_embeddings(5);
  save(saved, dir / "embeddings.safetensors");
  std::vector<std::string> names;
  for (const auto& [name, data] : record::load_safetensors(dir / "embeddings.safetensors")) {
    names.push_back(name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"LayerNorm.bias", "LayerNorm.weight", "dense.bias",
                                             "dense.weight", "mask", "position_ids", "running"}));
  Embeddings loaded = random_embeddings(6);
  load(loaded, dir / "embeddings.safetensors");
  EXPECT_EQ(contents_of(loaded), contents_of(saved));
  EXPECT_EQ(loaded.layer_norm.weight->val().into_data().to_vec<float>(),
            saved.layer_norm.weight->val().into_data().to_vec<float>());

  // A file that spells the member's C++ name does not match it: the missing names are listed.
  record::TensorMap cpp_names = to_record(saved);
  cpp_names["layer_norm.weight"] = cpp_names.extract("LayerNorm.weight").mapped();
  cpp_names["layer_norm.bias"] = cpp_names.extract("LayerNorm.bias").mapped();
  expect_error<InvalidArgument>([&] { load_record(loaded, cpp_names); }, "nn::load",
                                {"not in the record: 'LayerNorm.weight', 'LayerNorm.bias'; closest "
                                 "names in the record: 'LayerNorm.weight' ~ 'layer_norm.weight'"});
}

// A KILN_NAMED name that another member has: saving and loading both refuse the module.
struct Clash {
  Linear LayerNorm;
  Linear layer_norm;
  KILN_MODULE(LayerNorm, KILN_NAMED(layer_norm, "LayerNorm"))
};

TEST(ModuleLoad, TwoMembersUnderOneNameAreRefused) {
  Clash clash{LinearConfig{2, 2}.init(kCpu), LinearConfig{2, 2}.init(kCpu)};
  expect_error<InvalidArgument>([&] { (void)to_record(clash); }, "nn::save",
                                {"two parameters are named 'LayerNorm.weight'"});
  expect_error<InvalidArgument>([&] { load_record(clash, to_record(clash.LayerNorm)); }, "nn::load",
                                {"record: two entries of the module are named 'LayerNorm.weight'"});
}

TEST(FromRecord, BuildsWithoutDrawingAndLoadsEveryValue) {
  ScratchDir dir;
  const Embeddings saved = random_embeddings(7);
  save(saved, dir / "embeddings.safetensors");

  kCpu.seed(30);
  const std::vector<float> after_seed = next_draws(kCpu);
  kCpu.seed(30);
  const Embeddings from_file =
      from_record(EmbeddingsConfig{}, dir / "embeddings.safetensors", kCpu);
  EXPECT_EQ(next_draws(kCpu), after_seed);  // the generator was not touched
  EXPECT_EQ(contents_of(from_file), contents_of(saved));

  kCpu.seed(30);
  const Embeddings from_map = from_record(EmbeddingsConfig{}, to_record(saved), kCpu);
  EXPECT_EQ(next_draws(kCpu), after_seed);
  EXPECT_EQ(contents_of(from_map), contents_of(saved));

  // A library layer's config, and the load options.
  kCpu.seed(31);
  const Linear dense = LinearConfig{5, 3}.init(kCpu);
  record::TensorMap whole;
  for (const auto& [name, data] : to_record(dense)) whole["encoder.dense." + name] = data;
  whole["pooler.weight"] = TensorData::from_vec(std::vector<float>{1});
  const Linear loaded = from_record(LinearConfig{5, 3}, whole, kCpu, {.prefix = "encoder.dense."});
  EXPECT_EQ(contents_of(loaded), contents_of(dense));
}

TEST(FromRecord, IsStrict) {
  ScratchDir dir;
  record::TensorMap partial = to_record(random_embeddings(8));
  partial.erase("LayerNorm.bias");
  record::save_safetensors(dir / "partial.safetensors", partial);
  expect_error<InvalidArgument>(
      [&] { (void)from_record(EmbeddingsConfig{}, dir / "partial.safetensors", kCpu); }, "nn::load",
      {(dir / "partial.safetensors").string() +
       ": 1 parameter(s) of the module are not in the record: 'LayerNorm.bias'; closest names in "
       "the record: 'LayerNorm.bias' ~ 'LayerNorm.weight'"});
  // Unexpected names, another shape and another kind are refused as load refuses them.
  record::TensorMap extra = to_record(random_embeddings(9));
  extra["unused"] = TensorData::from_vec(std::vector<float>{1});
  EXPECT_THROW((void)from_record(EmbeddingsConfig{}, extra, kCpu), InvalidArgument);
  EXPECT_NO_THROW((void)from_record(EmbeddingsConfig{}, extra, kCpu, {.allow_unexpected = true}));
  EXPECT_THROW(
      (void)from_record(EmbeddingsConfig{.positions = 7}, to_record(random_embeddings(9)), kCpu),
      ShapeMismatch);
  record::TensorMap float_ids = to_record(random_embeddings(9));
  float_ids["position_ids"] = float_ids.at("position_ids").convert(DType::F32);
  EXPECT_THROW((void)from_record(EmbeddingsConfig{}, float_ids, kCpu), DTypeMismatch);
}

}  // namespace
}  // namespace kiln::nn
