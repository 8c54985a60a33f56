// Files written by the reference implementation (Python safetensors, see
// fixtures/make_fixtures.py): kiln must read them to the values the script used, and write
// the very same bytes for the same tensors.
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/nn/linear.h>
#include <kiln/nn/record.h>
#include <kiln/record/safetensors.h>

#include <bit>
#include <cstring>

#include "record/record_test_util.h"

namespace kiln::record {
namespace {

using testing::fixture;
using testing::read_bytes;

template <class T, class F>
TensorData generate(Shape shape, F f) {
  std::vector<T> values;
  for (std::int64_t i = 0; i < shape.num_elements(); ++i) values.push_back(static_cast<T>(f(i)));
  return TensorData::from_vec(values, std::move(shape));
}

using testing::from_bits;

// make_fixtures.py's all_dtypes(), recomputed from its formulas.
TensorMap all_dtypes() {
  TensorMap t;
  t["f64"] = generate<double>({3, 4}, [](auto i) { return i * 0.25 - 1.5; });
  t["f32"] = generate<float>({2, 3}, [](auto i) { return (static_cast<float>(i) - 2.5f) / 4; });
  t["f16"] = generate<half>({8}, [](auto i) { return half(static_cast<float>(i - 4) * 0.5f); });
  t["f16_bits"] =
      from_bits<half>({0x0001, 0x03FF, 0x3C00, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x8000}, {8});
  std::vector<std::uint16_t> bf16;
  for (int i = 0; i < 8; ++i) {
    bf16.push_back(static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>((i - 3) * 0.75f) >> 16));
  }
  t["bf16"] = from_bits<bfloat16>(bf16, {2, 4});
  t["i64"] = generate<std::int64_t>({6}, [](auto i) { return (i - 3) * 1'000'000'000'000; });
  t["i32"] = generate<std::int32_t>({2, 3, 4}, [](auto i) { return i - 12; });
  t["i16"] = generate<std::int16_t>({5}, [](auto i) { return i * -1000; });
  t["i8"] = TensorData::from_vec(std::vector<std::int8_t>{-128, -1, 0, 1, 127});
  t["u64"] = TensorData::from_vec(
      std::vector<std::uint64_t>{0, 1, std::uint64_t{1} << 63, ~std::uint64_t{0}});
  t["u32"] = generate<std::uint32_t>({4}, [](auto i) { return i * 1'000'000'000; });
  t["u16"] = TensorData::from_vec(std::vector<std::uint16_t>{0, 1, 65535});
  t["u8"] = generate<std::uint8_t>({16, 16}, [](auto i) { return i; });
  t["bool"] = TensorData::from_vec(std::vector<bool>{true, false, false, true, false, false, true});
  t["scalar"] = TensorData::from_vec(std::vector<float>{3.5f}, Shape{});
  t["empty"] = TensorData::from_vec(std::vector<float>{}, {0, 3});
  t["empty_i64"] = TensorData::from_vec(std::vector<std::int64_t>{}, {2, 0, 4});
  t["layers.0.weight"] = generate<float>({2, 2}, [](auto i) { return i + 0.5; });
  t["\xc3\xa9t\xc3\xa9"] = TensorData::from_vec(std::vector<std::uint8_t>{7});
  return t;
}

TEST(SafetensorsFixture, ReadsEveryDTypeThePythonPackageWrote) {
  const SafetensorsFile file = load_safetensors_with_metadata(fixture("all_dtypes.safetensors"));
  const TensorMap expected = all_dtypes();
  ASSERT_EQ(file.tensors.size(), expected.size());
  for (const auto& [name, data] : expected) {
    ASSERT_TRUE(file.tensors.contains(name)) << name;
    const TensorData& got = file.tensors.at(name);
    EXPECT_EQ(got.dtype(), data.dtype()) << name;
    EXPECT_EQ(got.shape(), data.shape()) << name;
    EXPECT_TRUE(std::ranges::equal(got.bytes(), data.bytes())) << name;
  }
  EXPECT_EQ(file.metadata, (Metadata{{"format", "np"}}));
  // A few values spelled out, so a mistake shared by the formulas above would still show.
  EXPECT_EQ(file.tensors.at("f64").to_vec<double>()[11], 1.25);
  EXPECT_EQ(file.tensors.at("u64").to_vec<std::uint64_t>()[3], 18446744073709551615ull);
  EXPECT_EQ(file.tensors.at("bf16").to_f64_vec()[0], -2.25);
  EXPECT_EQ(file.tensors.at("f16").to_f64_vec()[0], -2.0);
  EXPECT_EQ(file.tensors.at("i32").to_vec<std::int32_t>()[23], 11);
}

TEST(SafetensorsFixture, WritesTheSameBytesAsThePythonPackage) {
  EXPECT_EQ(serialize_safetensors(all_dtypes(), {{"format", "np"}}),
            read_bytes(fixture("all_dtypes.safetensors")));
  TensorMap linear;
  linear["weight"] = generate<half>({2, 3}, [](auto i) { return half(i / 8.0f - 0.25f); });
  linear["bias"] = TensorData::from_vec(std::vector<half>{half(0.5f), half(-0.5f)});
  EXPECT_EQ(serialize_safetensors(linear), read_bytes(fixture("linear_float16.safetensors")));
}

TEST(SafetensorsFixture, ReadsSeveralMetadataEntries) {
  const SafetensorsFile file =
      load_safetensors_with_metadata(fixture("linear_float32.safetensors"));
  const Metadata expected = {
      {"format", "pt"}, {"note", "caf\xc3\xa9 \"quoted\"\n"}, {"source", "make_fixtures.py"}};
  EXPECT_EQ(file.metadata, expected);
}

// A module loads a file PyTorch-style tools wrote: names "weight"/"bias", weight [out, in].
TEST(SafetensorsFixture, LinearLoadsThePythonWrittenFile) {
  for (const char* name : {"linear_float32.safetensors", "linear_float16.safetensors"}) {
    nn::Linear layer = nn::LinearConfig{3, 2}.init(Device::cpu());
    nn::load(layer, fixture(name));
    const std::vector<float> w = layer.weight.val().into_data().to_vec<float>();  // still f32
    ASSERT_EQ(w.size(), 6u);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(w[i], i / 8.0f - 0.25f) << name << " weight " << i;
    EXPECT_EQ(layer.bias->val().into_data().to_vec<float>(), (std::vector<float>{0.5f, -0.5f}))
        << name;
  }
}

}  // namespace
}  // namespace kiln::record
