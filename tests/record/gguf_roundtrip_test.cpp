// GGUF files written by kiln and read back, files built by hand, and the reader's view of them.
#include <gtest/gtest.h>
#include <kiln/quant.h>
#include <kiln/record/gguf.h>

#include <random>

#include "quant/block_reference.h"
#include "record/gguf_test_util.h"

namespace kiln::record {
namespace {

using testing::GgufBuilder;
using Kind = QuantScheme::Kind;

GgufMetadata every_value_type() {
  GgufMetadata m;
  m["u8"] = GgufValue(std::uint8_t{200});
  m["i8"] = GgufValue(std::int8_t{-100});
  m["u16"] = GgufValue(std::uint16_t{60000});
  m["i16"] = GgufValue(std::int16_t{-30000});
  m["u32"] = GgufValue(std::uint32_t{4000000000u});
  m["i32"] = GgufValue(std::int32_t{-2000000000});
  m["f32"] = GgufValue(0.1f);
  m["bool"] = GgufValue(true);
  m["string"] = GgufValue(std::string("ünïcode\0text", 13));
  m["u64"] = GgufValue(std::uint64_t{1} << 63);
  m["i64"] = GgufValue(std::int64_t{-1} << 62);
  m["f64"] = GgufValue(-1e300);
  m["empty"] = GgufValue(GgufArray{GgufType::Float64, {}});
  m["strings"] = GgufValue(
      GgufArray{GgufType::String, {GgufValue(std::string("a")), GgufValue(std::string())}});
  m["nested"] = GgufValue(
      GgufArray{GgufType::Array,
                {GgufValue(GgufArray{GgufType::Int32,
                                     {GgufValue(std::int32_t{1}), GgufValue(std::int32_t{2})}}),
                 GgufValue(GgufArray{GgufType::Bool, {GgufValue(false)}})}});
  m["general.alignment"] = GgufValue(std::uint32_t{64});
  return m;
}

GgufFile file_of_every_type() {
  GgufFile file{{}, every_value_type()};
  std::mt19937 rng(5);
  std::vector<float> f(6);
  for (float& v : f) v = std::normal_distribution<float>()(rng);
  file.tensors["f32"] = TensorData::from_vec(f, Shape{2, 3});
  file.tensors["f16"] = TensorData::from_vec(f, Shape{3, 2}).convert(DType::F16);
  file.tensors["bf16"] = TensorData::from_vec(f, Shape{6}).convert(DType::BF16);
  file.tensors["f64"] = TensorData::from_vec(f, Shape{1, 2, 3}).convert(DType::F64);
  file.tensors["i8"] = TensorData::from_vec(std::vector<std::int8_t>{-1, 2, 3}, Shape{3});
  file.tensors["i16"] = TensorData::from_vec(std::vector<std::int16_t>{-1, 2}, Shape{2, 1});
  file.tensors["i32"] = TensorData::from_vec(std::vector<std::int32_t>{7}, Shape{1, 1, 1, 1});
  file.tensors["i64"] = TensorData::from_vec(std::vector<std::int64_t>{-7, 8}, Shape{2});
  file.tensors["scalar"] = TensorData::from_vec(std::vector<float>{2.5f}, Shape{});
  file.tensors["empty"] = TensorData::from_vec(std::vector<float>{}, Shape{0, 3});
  for (Kind kind : {Kind::Q4_0, Kind::Q4_1, Kind::Q5_0, Kind::Q5_1, Kind::Q8_0, Kind::Q2_K,
                    Kind::Q3_K, Kind::Q4_K, Kind::Q5_K, Kind::Q6_K, Kind::Q8_K}) {
    const auto layout = quant_testing::layout(kind);
    file.tensors[std::string(quant_kind_name(kind))] =
        TensorData::quantized(quant_testing::random_blocks(kind, 6, rng),
                              Shape{3, 2 * layout.values}, quant_scheme(kind));
  }
  return file;
}

void expect_same(const GgufFile& a, const GgufFile& b) {
  EXPECT_EQ(a.metadata, b.metadata);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, x] : a.tensors) {
    const TensorData& y = b.tensors.at(name);
    EXPECT_EQ(x.dtype(), y.dtype()) << name;
    EXPECT_EQ(x.shape(), y.shape()) << name;
    if (x.dtype() == DType::QFloat) {
      EXPECT_EQ(x.scheme(), y.scheme()) << name;
    }
    EXPECT_TRUE(std::ranges::equal(x.bytes(), y.bytes())) << name;
  }
}

TEST(Gguf, EveryTypeSurvivesAFile) {
  testing::ScratchDir dir;
  const GgufFile file = file_of_every_type();
  save_gguf(dir / "all.gguf", file);
  const GgufFile loaded = load_gguf(dir / "all.gguf");
  expect_same(file, loaded);
  EXPECT_EQ(testing::read_bytes(dir / "all.gguf"), serialize_gguf(file));
  expect_same(file, parse_gguf(serialize_gguf(file)));
  EXPECT_EQ(loaded.metadata.at("strings").get<GgufArray>().values.at(0).get<std::string>(), "a");
}

TEST(Gguf, ReadsAHandBuiltFile) {
  // Two metadata pairs, the alignment 16, and a 2x3 f32 tensor (dims 3, 2 innermost first)
  // followed by a 1-D Q8_0 tensor at the next multiple of 16.
  GgufBuilder b;
  b.start(2, 2).str("general.alignment").u32(4).u32(16).str("name").u32(8).str("hand");
  b.tensor("q", {32}, 8, 32).tensor("w", {3, 2}, 0, 0).pad(16);
  for (int i = 0; i < 6; ++i) b.u32(std::bit_cast<std::uint32_t>(static_cast<float>(i) - 2.5f));
  b.pad(16).u16(0x3c00);  // a Q8_0 block: d = 1, then 32 codes
  for (int i = 0; i < 32; ++i) b.u8(static_cast<std::uint8_t>(i - 16));
  b.pad(16);
  const GgufFile file = parse_gguf(b.bytes());
  EXPECT_EQ(file.metadata.at("name").get<std::string>(), "hand");
  EXPECT_EQ(file.metadata.at("general.alignment").get<std::uint32_t>(), 16u);
  const TensorData& w = file.tensors.at("w");
  EXPECT_EQ(w.shape(), (Shape{2, 3}));
  EXPECT_EQ(w.to_vec<float>(), (std::vector<float>{-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f}));
  const TensorData& q = file.tensors.at("q");
  EXPECT_EQ(q.scheme(), quant_scheme(Kind::Q8_0));
  const std::vector<float> values = q.dequantize().to_vec<float>();
  for (int i = 0; i < 32; ++i) EXPECT_EQ(values[i], static_cast<float>(i - 16));
  // kiln's writer lays the same content out the same way (keys and tensors in name order).
  GgufBuilder sorted;
  sorted.start(2, 2).str("general.alignment").u32(4).u32(16).str("name").u32(8).str("hand");
  sorted.tensor("q", {32}, 8, 0).tensor("w", {3, 2}, 0, 48).pad(16);
  sorted.u16(0x3c00);
  for (int i = 0; i < 32; ++i) sorted.u8(static_cast<std::uint8_t>(i - 16));
  sorted.pad(16);
  for (int i = 0; i < 6; ++i)
    sorted.u32(std::bit_cast<std::uint32_t>(static_cast<float>(i) - 2.5f));
  sorted.pad(16);
  EXPECT_EQ(serialize_gguf(file), sorted.bytes());
}

TEST(Gguf, AnEmptyFileHasNoTensors) {
  GgufBuilder b;
  b.start(0, 0);
  const GgufFile file = parse_gguf(b.bytes());
  EXPECT_TRUE(file.tensors.empty());
  EXPECT_TRUE(file.metadata.empty());
  GgufBuilder v2;
  v2.start(0, 1, 2).str("k").u32(7).u8(1);
  EXPECT_TRUE(parse_gguf(v2.bytes()).metadata.at("k").get<bool>());
}

TEST(GgufValue, GetNamesBothTypes) {
  const GgufValue v(std::uint32_t{3});
  EXPECT_EQ(v.type(), GgufType::UInt32);
  EXPECT_EQ(v.get<std::uint32_t>(), 3u);
  try {
    (void)v.get<std::string>();
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "[GgufValue::get] the value is a uint32, not a string");
  }
  EXPECT_EQ(GgufValue().type(), GgufType::UInt8);
  EXPECT_EQ(GgufValue(std::string("x")).type(), GgufType::String);
}

}  // namespace
}  // namespace kiln::record
