// save_safetensors / load_safetensors round trips: every dtype bit for bit, empty and scalar
// tensors, metadata, and the writer's layout rules.
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/record/safetensors.h>

#include <cmath>
#include <limits>

#include "record/record_test_util.h"

namespace kiln::record {
namespace {

using testing::read_bytes;
using testing::ScratchDir;

using testing::from_bits;

// One tensor of every dtype, including the awkward values: NaN payloads, -0, subnormals,
// infinities, integer extremes.
TensorMap every_dtype() {
  TensorMap t;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  t["f64"] = TensorData::from_vec(std::vector<double>{1.5, -0.0, nan, inf, 5e-324, -1e308}, {2, 3});
  t["f32"] = TensorData::from_vec(std::vector<float>{0.1f, -2.5f, 1e-45f, -INFINITY}, {4});
  t["f16"] =
      from_bits<half>({0x0001, 0x03ff, 0x3c00, 0x7bff, 0x7c00, 0xfc00, 0x7e01, 0x8000}, {2, 2, 2});
  t["bf16"] = from_bits<bfloat16>({0x0001, 0x3f80, 0x7f80, 0xff81, 0x8000, 0x4049}, {3, 2});
  t["i64"] = TensorData::from_vec(std::vector<std::int64_t>{
      std::numeric_limits<std::int64_t>::min(), -1, 0, std::numeric_limits<std::int64_t>::max()});
  t["i32"] = TensorData::from_vec(std::vector<std::int32_t>{-7, 1 << 30, 3}, {3, 1});
  t["i16"] = TensorData::from_vec(std::vector<std::int16_t>{-32768, 32767});
  t["i8"] = TensorData::from_vec(std::vector<std::int8_t>{-128, 0, 127});
  t["u64"] = TensorData::from_vec(std::vector<std::uint64_t>{0, ~std::uint64_t{0}});
  t["u32"] = TensorData::from_vec(std::vector<std::uint32_t>{4'000'000'000u, 1});
  t["u16"] = TensorData::from_vec(std::vector<std::uint16_t>{65535, 2, 3});
  t["u8"] = TensorData::from_vec(std::vector<std::uint8_t>{255, 0, 9});
  t["bool"] = TensorData::from_vec(std::vector<bool>{true, false, false, true, true}, {5});
  return t;
}

void expect_same(const TensorMap& got, const TensorMap& expected) {
  ASSERT_EQ(got.size(), expected.size());
  for (const auto& [name, data] : expected) {
    ASSERT_TRUE(got.contains(name)) << name;
    const TensorData& g = got.at(name);
    EXPECT_EQ(g.dtype(), data.dtype()) << name;
    EXPECT_EQ(g.shape(), data.shape()) << name;
    // Bytes, not values: NaN payloads, -0 and f16/bf16 bits must survive exactly.
    ASSERT_EQ(g.bytes().size(), data.bytes().size()) << name;
    EXPECT_TRUE(std::equal(g.bytes().begin(), g.bytes().end(), data.bytes().begin())) << name;
  }
}

TEST(Safetensors, RoundTripsEveryDTypeBitForBit) {
  ScratchDir dir;
  const TensorMap tensors = every_dtype();
  save_safetensors(dir / "all.safetensors", tensors);
  const TensorMap loaded = load_safetensors(dir / "all.safetensors");
  expect_same(loaded, tensors);
  EXPECT_EQ(loaded.at("bool").to_vec<bool>(), (std::vector<bool>{true, false, false, true, true}));
  EXPECT_EQ(loaded.at("bf16").as_span<bfloat16>()[1].bits, 0x3f80);
  EXPECT_FLOAT_EQ(static_cast<float>(loaded.at("f16").as_span<half>()[2]), 1.0f);
  EXPECT_TRUE(std::isnan(loaded.at("f64").to_vec<double>()[2]));
  EXPECT_TRUE(std::signbit(loaded.at("f64").to_vec<double>()[1]));
}

TEST(Safetensors, RoundTripsEmptyScalarAndZeroSizedTensors) {
  ScratchDir dir;
  TensorMap tensors;
  tensors["scalar"] = TensorData(std::vector<std::byte>(8, std::byte{0x40}), Shape{}, DType::F64);
  tensors["empty"] = TensorData::from_vec(std::vector<float>{}, {0});
  tensors["zero_middle"] = TensorData::from_vec(std::vector<std::int32_t>{}, {3, 0, 2});
  tensors["zero_bool"] = TensorData::from_vec(std::vector<bool>{}, {0, 4});
  tensors["one"] = TensorData::from_vec(std::vector<std::uint8_t>{42}, {1, 1, 1});
  save_safetensors(dir / "e.safetensors", tensors);
  const TensorMap loaded = load_safetensors(dir / "e.safetensors");
  expect_same(loaded, tensors);
  EXPECT_EQ(loaded.at("scalar").shape().rank(), 0u);
  EXPECT_EQ(loaded.at("zero_middle").shape(), (Shape{3, 0, 2}));

  // No tensors at all is a valid file too: a header "{}" padded to 8 bytes, no data.
  save_safetensors(dir / "none.safetensors", {});
  EXPECT_TRUE(load_safetensors(dir / "none.safetensors").empty());
  EXPECT_EQ(read_bytes(dir / "none.safetensors").size(), 16u);
}

TEST(Safetensors, RoundTripsMetadata) {
  ScratchDir dir;
  const Metadata metadata = {{"format", "pt"},
                             {"note", "caf\xc3\xa9 \"quoted\"\n\ttab \\ slash"},
                             {"empty", ""},
                             {"\x01key", "control"}};
  TensorMap tensors;
  tensors["w"] = TensorData::from_vec(std::vector<float>{1, 2});
  save_safetensors(dir / "m.safetensors", tensors, metadata);
  const SafetensorsFile file = load_safetensors_with_metadata(dir / "m.safetensors");
  EXPECT_EQ(file.metadata, metadata);
  expect_same(file.tensors, tensors);
  // Without metadata the header has no __metadata__ entry, as the reference writes it.
  save_safetensors(dir / "n.safetensors", tensors);
  EXPECT_TRUE(load_safetensors_with_metadata(dir / "n.safetensors").metadata.empty());
  const std::vector<std::byte> bytes = read_bytes(dir / "n.safetensors");
  const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  EXPECT_EQ(text.find("__metadata__"), std::string::npos);
}

TEST(Safetensors, SerializeMatchesTheFileAndParsesBack) {
  ScratchDir dir;
  const TensorMap tensors = every_dtype();
  const Metadata metadata = {{"k", "v"}};
  save_safetensors(dir / "a.safetensors", tensors, metadata);
  const std::vector<std::byte> bytes = serialize_safetensors(tensors, metadata);
  EXPECT_EQ(bytes, read_bytes(dir / "a.safetensors"));
  EXPECT_EQ(bytes, serialize_safetensors(tensors, metadata));  // deterministic
  const SafetensorsFile parsed = parse_safetensors(bytes);
  expect_same(parsed.tensors, tensors);
  EXPECT_EQ(parsed.metadata, metadata);
}

// Reads the header with the format's own rules (independently of the reader under test).
std::uint64_t header_length(const std::vector<std::byte>& bytes) {
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(bytes[i]) << (8 * i);
  return n;
}

TEST(Safetensors, WriterPadsTheHeaderAndAlignsEveryTensor) {
  const TensorMap tensors = every_dtype();
  const std::vector<std::byte> bytes = serialize_safetensors(tensors);
  const std::uint64_t n = header_length(bytes);
  EXPECT_EQ(n % 8, 0u);
  const std::string header(reinterpret_cast<const char*>(bytes.data()) + 8, n);
  EXPECT_EQ(header.front(), '{');
  // Padding is spaces after the closing brace.
  const std::size_t close = header.find_last_of('}');
  EXPECT_LT(header.size() - close - 1, 8u);
  for (std::size_t i = close + 1; i < header.size(); ++i) EXPECT_EQ(header[i], ' ');
  // Wider dtypes first, so each tensor's offset is a multiple of its element size.
  for (const auto& [name, data] : tensors) {
    const std::string key = "\"" + name + "\":{\"dtype\":";
    const std::size_t at = header.find(key);
    ASSERT_NE(at, std::string::npos) << name;
    const std::size_t offsets = header.find("\"data_offsets\":[", at) + 16;
    const std::uint64_t begin = std::stoull(header.substr(offsets));
    EXPECT_EQ(begin % dtype_size(data.dtype()), 0u) << name << " at " << begin;
  }
  // The 8-byte types lead and bool closes the buffer.
  EXPECT_LT(header.find("\"u64\""), header.find("\"f32\""));
  EXPECT_LT(header.find("\"i64\""), header.find("\"i16\""));
  EXPECT_GT(header.find("\"bool\""), header.find("\"u8\""));
}

TEST(Safetensors, SaveReplacesAnExistingFileAndLeavesNoPartialFile) {
  ScratchDir dir;
  TensorMap first, second;
  first["a"] = TensorData::from_vec(std::vector<float>{1, 2, 3});
  second["b"] = TensorData::from_vec(std::vector<std::int8_t>{4});
  save_safetensors(dir / "x.safetensors", first);
  save_safetensors(dir / "x.safetensors", second);
  expect_same(load_safetensors(dir / "x.safetensors"), second);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "")) {
    EXPECT_EQ(entry.path().filename(), "x.safetensors") << "a temporary was left behind";
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(Safetensors, SaveRejectsWhatTheFormatCannotHold) {
  ScratchDir dir;
  TensorMap reserved;
  reserved["__metadata__"] = TensorData::from_vec(std::vector<float>{1});
  try {
    save_safetensors(dir / "r.safetensors", reserved);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'__metadata__' is reserved"), std::string::npos)
        << e.what();
  }
  TensorMap bad_name;
  bad_name["w\xff"] = TensorData::from_vec(std::vector<float>{1});
  try {
    (void)serialize_safetensors(bad_name);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("tensor name is not valid UTF-8"), std::string::npos)
        << e.what();
  }
  TensorMap ok;
  ok["w"] = TensorData::from_vec(std::vector<float>{1});
  EXPECT_THROW((void)serialize_safetensors(ok, {{"k", "\xc3"}}), InvalidArgument);
  const std::filesystem::path nowhere = dir / "no_such_dir" / "w.safetensors";
  try {
    save_safetensors(nowhere, ok);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("[save_safetensors] " + nowhere.string()), std::string::npos) << message;
    EXPECT_NE(message.find("cannot create"), std::string::npos) << message;
    EXPECT_NE(message.find("No such file or directory"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace kiln::record
