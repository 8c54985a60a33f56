// Files built byte by byte from the format's description (not by kiln's writer), read by kiln;
// and kiln's writer output compared with bytes laid out by hand.
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/record/safetensors.h>

#include "record/record_test_util.h"

namespace kiln::record {
namespace {

using testing::make_file;
using testing::ScratchDir;
using testing::write_bytes;

TEST(SafetensorsBytes, ReadsAHandBuiltFile) {
  ScratchDir dir;
  // "b" comes first in the header but second in the buffer; the header is not padded (8 + 129
  // bytes), has whitespace and newlines, and the reader must accept all of that.
  const std::string json =
      "{\n  \"b\": {\"dtype\": \"I16\", \"shape\": [2], \"data_offsets\": [4, 8]},\n"
      "  \"__metadata__\": {\"who\": \"hand\"},\n"
      "  \"a\": {\"data_offsets\": [0, 4], \"shape\": [1, 1], \"dtype\": \"F32\"}\n}";
  // F32 1.0 = 0x3f800000 little-endian; I16 -2 = 0xfffe, 258 = 0x0102.
  const std::vector<std::uint8_t> data = {0x00, 0x00, 0x80, 0x3f, 0xfe, 0xff, 0x02, 0x01};
  write_bytes(dir / "h.safetensors", make_file(json, data));
  const SafetensorsFile file = load_safetensors_with_metadata(dir / "h.safetensors");
  ASSERT_EQ(file.tensors.size(), 2u);
  EXPECT_EQ(file.tensors.at("a").dtype(), DType::F32);
  EXPECT_EQ(file.tensors.at("a").shape(), (Shape{1, 1}));
  EXPECT_EQ(file.tensors.at("a").to_vec<float>(), std::vector<float>{1.0f});
  EXPECT_EQ(file.tensors.at("b").to_vec<std::int16_t>(), (std::vector<std::int16_t>{-2, 258}));
  EXPECT_EQ(file.metadata, (Metadata{{"who", "hand"}}));
}

TEST(SafetensorsBytes, ReadsEveryDTypeNameAndLittleEndianValues) {
  struct Case {
    const char* name;
    std::vector<std::uint8_t> bytes;  // one element, little-endian
    double value;
    DType dtype;
  };
  const std::vector<Case> cases = {
      {"F64", {0, 0, 0, 0, 0, 0, 0xf8, 0x3f}, 1.5, DType::F64},
      {"F32", {0, 0, 0x20, 0xc0}, -2.5, DType::F32},
      {"F16", {0x00, 0x3e}, 1.5, DType::F16},
      {"BF16", {0xc0, 0x3f}, 1.5, DType::BF16},
      {"I64", {0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, -2, DType::I64},
      {"I32", {0x00, 0x01, 0x00, 0x00}, 256, DType::I32},
      {"I16", {0xff, 0x7f}, 32767, DType::I16},
      {"I8", {0x80}, -128, DType::I8},
      {"U64", {0, 0, 0, 0, 1, 0, 0, 0}, 4294967296.0, DType::U64},
      {"U32", {0xff, 0xff, 0xff, 0xff}, 4294967295.0, DType::U32},
      {"U16", {0x34, 0x12}, 0x1234, DType::U16},
      {"U8", {0xc8}, 200, DType::U8},
      {"BOOL", {0x01}, 1, DType::Bool},
  };
  for (const Case& c : cases) {
    const std::string json = std::string("{\"x\":{\"dtype\":\"") + c.name +
                             "\",\"shape\":[],\"data_offsets\":[0," +
                             std::to_string(c.bytes.size()) + "]}}";
    const SafetensorsFile file = parse_safetensors(make_file(json, c.bytes));
    const TensorData& x = file.tensors.at("x");
    EXPECT_EQ(x.dtype(), c.dtype) << c.name;
    EXPECT_EQ(x.shape().rank(), 0u) << c.name;
    EXPECT_EQ(x.to_f64_vec(), std::vector<double>{c.value}) << c.name;
  }
}

TEST(SafetensorsBytes, WriterProducesTheBytesTheFormatDescribes) {
  TensorMap tensors;
  tensors["a"] = TensorData::from_vec(std::vector<std::uint8_t>{7});
  tensors["w"] = TensorData::from_vec(std::vector<float>{1.0f, -2.0f}, {1, 2});
  // Compact JSON, the F32 tensor first (wider), fields in the reference's order, then spaces
  // up to a multiple of 8 bytes (133 characters of JSON get 3).
  const std::string json =
      "{\"__metadata__\":{\"k\":\"v\"},"
      "\"w\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,8]},"
      "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[8,9]}}";
  ASSERT_EQ(json.size(), 133u);
  const std::string padded = json + "   ";
  const std::vector<std::uint8_t> data = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0, 0x07};
  const std::vector<std::byte> expected = make_file(padded, data);
  EXPECT_EQ(serialize_safetensors(tensors, {{"k", "v"}}), expected);
}

}  // namespace
}  // namespace kiln::record
