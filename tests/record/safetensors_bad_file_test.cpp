// Every way a safetensors file can be wrong: each must throw a kiln::Error naming the file
// and the problem, from both the file reader and the in-memory parser, and never crash.
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/record/safetensors.h>

#include "record/record_test_util.h"

namespace kiln::record {
namespace {

using testing::make_file;
using testing::ScratchDir;
using testing::write_bytes;

std::vector<std::byte> as_bytes(std::string_view text) {
  std::vector<std::byte> out;
  for (char c : text) out.push_back(static_cast<std::byte>(c));
  return out;
}

void expect_message(const std::string& message, std::string_view prefix,
                    const std::vector<std::string>& parts) {
  EXPECT_EQ(message.rfind(prefix, 0), 0u)
      << "message: " << message << "\nexpected prefix: " << prefix;
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos)
        << "message: " << message << "\nexpected to contain: " << part;
  }
}

// Loads file through load_safetensors and parse_safetensors; both must throw E with a message
// that starts with "[op] origin: " and contains every part.
template <class E = InvalidArgument>
void expect_rejected(const std::vector<std::byte>& file, const std::vector<std::string>& parts) {
  ScratchDir dir;
  const std::filesystem::path path = dir / "bad.safetensors";
  write_bytes(path, file);
  try {
    (void)load_safetensors(path);
    ADD_FAILURE() << "load_safetensors accepted the file; expected: " << parts.front();
  } catch (const E& e) {
    expect_message(e.what(), "[load_safetensors] " + path.string() + ": ", parts);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "load_safetensors threw the wrong type: " << e.what();
  }
  try {
    (void)parse_safetensors(file, "in-memory.safetensors");
    ADD_FAILURE() << "parse_safetensors accepted the bytes; expected: " << parts.front();
  } catch (const E& e) {
    expect_message(e.what(), "[parse_safetensors] in-memory.safetensors: ", parts);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "parse_safetensors threw the wrong type: " << e.what();
  }
}

// One F32 tensor "w" of shape [2, 2] at [0, 16] is the valid baseline the cases break.
const std::vector<std::uint8_t> kSixteen(16, 0);

TEST(SafetensorsBadFile, MissingOrNotAFile) {
  ScratchDir dir;
  const std::filesystem::path missing = dir / "missing.safetensors";
  try {
    (void)load_safetensors(missing);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    expect_message(e.what(), "[load_safetensors] " + missing.string() + ": ", {"no such file"});
  }
  try {
    (void)load_safetensors(dir / "");
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
}

TEST(SafetensorsBadFile, TooShortForTheLengthPrefix) {
  expect_rejected({}, {"the file has 0 bytes, too few for the 8-byte header length"});
  expect_rejected(as_bytes(std::string_view("\x02\0\0\0\0", 5)), {"the file has 5 bytes"});
}

TEST(SafetensorsBadFile, HeaderLengthPastTheEndOrAbsurd) {
  expect_rejected(make_file("{}", {}, 1000),
                  {"the header length 1000 runs past the end of the 10-byte file"});
  expect_rejected(make_file("{}", {}, 100'000'001),
                  {"the header length 100000001 is over the limit of 100000000 bytes"});
  expect_rejected(make_file("{}", {}, ~std::uint64_t{0}),
                  {"the header length 18446744073709551615 is over the limit"});
  // A header cut short: the declared length is one past what is there.
  expect_rejected(make_file("{}", {}, 3), {"runs past the end of the 10-byte file"});
}

TEST(SafetensorsBadFile, HeaderNotJsonOrNotAnObject) {
  expect_rejected(make_file("", {}), {"the header is not valid JSON"});
  expect_rejected(make_file("{\"w\":", {}), {"the header is not valid JSON"});
  expect_rejected(make_file("{} trailing", {}), {"the header is not valid JSON"});
  expect_rejected(make_file("{\"\xff\":1}", {}), {"the header is not valid JSON"});
  expect_rejected(make_file("[1, 2]", {}), {"the header is an array, not a JSON object"});
  // Deep nesting is refused while parsing, before it can cost memory.
  expect_rejected(make_file("{\"w\":" + std::string(100, '[') + std::string(100, ']') + "}", {}),
                  {"the header nests deeper than 16 levels"});
  expect_rejected(make_file("\"text\"", {}), {"the header is a string, not a JSON object"});
  expect_rejected(make_file("null", {}), {"the header is null, not a JSON object"});
}

TEST(SafetensorsBadFile, EntriesOfTheWrongTypes) {
  expect_rejected(make_file("{\"w\":3}", {}),
                  {"tensor 'w' is a number, not an object with dtype, shape and data_offsets"});
  expect_rejected(make_file("{\"w\":{\"shape\":[],\"data_offsets\":[0,0]}}", {}),
                  {"tensor 'w' has no dtype"});
  expect_rejected(make_file("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,0]}}", {}),
                  {"tensor 'w' has no shape"});
  expect_rejected(make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[0]}}", {}),
                  {"tensor 'w' has no data_offsets"});
  expect_rejected(make_file("{\"w\":{\"dtype\":32,\"shape\":[],\"data_offsets\":[0,4]}}", {}),
                  {"tensor 'w' has a dtype that is a number, not a string"});
  expect_rejected(
      make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":\"2x2\",\"data_offsets\":[0,16]}}", kSixteen),
      {"tensor 'w' has a shape that is a string, not an array"});
  expect_rejected(
      make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16],\"extra\":1}}",
                kSixteen),
      {"tensor 'w' has an unknown field 'extra'"});
  expect_rejected(make_file("{\"__metadata__\":[\"a\"]}", {}),
                  {"__metadata__ is an array, not an object of strings"});
  expect_rejected(make_file("{\"__metadata__\":{\"epoch\":3}}", {}),
                  {"__metadata__ entry 'epoch' is a number, not a string"});
}

TEST(SafetensorsBadFile, UnknownOrUnsupportedDType) {
  expect_rejected(
      make_file("{\"w\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", {0, 0, 0, 0}),
      {"tensor 'w' has unknown dtype 'F33'"});
  expect_rejected(
      make_file("{\"w\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", {0, 0, 0, 0}),
      {"unknown dtype 'f32'"});
  expect_rejected<UnsupportedDType>(
      make_file("{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", {0}),
      {"tensor 'w' has dtype F8_E4M3, which kiln cannot hold"});
}

TEST(SafetensorsBadFile, BadShapes) {
  expect_rejected(
      make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-2],\"data_offsets\":[0,16]}}", kSixteen),
      {"tensor 'w' has the negative dim -2 at position 1 of its shape [2,-2]"});
  expect_rejected(
      make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2.0],\"data_offsets\":[0,16]}}", kSixteen),
      {"tensor 'w' has 2.0 at position 1 of its shape", "not a non-negative integer"});
  expect_rejected(make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}",
                            {0, 0, 0, 0, 0, 0, 0, 0}),
                  {"not a non-negative integer"});
  expect_rejected(make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[18446744073709551616],"
                            "\"data_offsets\":[0,0]}}",
                            {}),
                  {"not a non-negative integer"});
  expect_rejected(make_file("{\"w\":{\"dtype\":\"U8\",\"shape\":[9223372036854775808],"
                            "\"data_offsets\":[0,0]}}",
                            {}),
                  {"tensor 'w' has shape [9223372036854775808], 2^63 elements or more"});
  expect_rejected(make_file("{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,0],"
                            "\"data_offsets\":[0,0]}}",
                            {}),
                  {"2^63 elements or more"});
  expect_rejected(make_file("{\"w\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],"
                            "\"data_offsets\":[0,0]}}",
                            {}),
                  {"tensor 'w' has shape [2305843009213693952] F64, 2^64 bytes or more"});
}

TEST(SafetensorsBadFile, BadOffsets) {
  auto file = [](std::string_view offsets, std::size_t data_size = 16) {
    return make_file(
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":" + std::string(offsets) + "}}",
        std::vector<std::uint8_t>(data_size, 0));
  };
  const std::string not_two = "not an array of two non-negative integers";
  expect_rejected(file("0"), {"tensor 'w' has data_offsets 0, " + not_two});
  expect_rejected(file("[0]"), {not_two});
  expect_rejected(file("[0,16,16]"), {not_two});
  expect_rejected(file("[-1,15]"), {not_two});
  expect_rejected(file("[0,16.0]"), {not_two});
  expect_rejected(file("[16,0]"), {"tensor 'w' has reversed data_offsets [16, 0]"});
  expect_rejected(file("[0,32]"),
                  {"tensor 'w' has data_offsets [0, 32] past the end of the 16-byte data buffer"});
  expect_rejected(file("[0,12]", 12),
                  {"tensor 'w' has data_offsets [0, 12] but shape [2, 2] F32 needs 16 bytes"});
}

TEST(SafetensorsBadFile, DataShorterThanDeclared) {
  // A valid file with its last bytes cut off.
  TensorMap tensors;
  tensors["w"] = TensorData::from_vec(std::vector<float>{1, 2, 3, 4}, {2, 2});
  std::vector<std::byte> bytes = serialize_safetensors(tensors);
  bytes.resize(bytes.size() - 3);
  expect_rejected(bytes, {"tensor 'w' has data_offsets [0, 16] past the end of the 13-byte data "
                          "buffer (a truncated file?)"});
}

TEST(SafetensorsBadFile, TensorsMustTileTheDataBuffer) {
  const std::vector<std::uint8_t> twelve(12, 0);
  expect_rejected(make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                            "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                            twelve),
                  {"tensor 'b' at data_offsets [4, 12] overlaps tensor 'a' at [0, 8]"});
  expect_rejected(make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                            "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                            twelve),
                  {"bytes [4, 8) of the data buffer belong to no tensor"});
  expect_rejected(
      make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", twelve),
      {"the data buffer has 12 bytes but the tensors cover only 8 (trailing bytes)"});
  // Two tensors on the same bytes.
  expect_rejected(make_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                            "\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                            {1, 2, 3, 4}),
                  {"overlaps tensor"});
  // An empty tensor inside another one's bytes is also rejected, as the reference does.
  expect_rejected(make_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                            "\"b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]}}",
                            {1, 2, 3, 4}),
                  {"tensor 'b' at data_offsets [2, 2] overlaps tensor 'a'"});
}

TEST(SafetensorsBadFile, DuplicateNamesAndKeys) {
  expect_rejected(make_file("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                            "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                            {1, 2}),
                  {"tensor name 'w' appears twice"});
  expect_rejected(
      make_file("{\"w\":{\"dtype\":\"U8\",\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                {1}),
      {"key 'dtype' appears twice in one object"});
  expect_rejected(make_file("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", {}),
                  {"key 'k' appears twice in one object"});
}

// The reference reader takes the header as UTF-8 JSON text (serde_json): a byte-order mark is
// not JSON, and a NUL byte is neither whitespace nor allowed raw in a string. nlohmann skipped
// the one and ended the text at the other, accepting what follows as if it were padding.
TEST(SafetensorsBadFile, ByteOrderMarkBeforeTheHeader) {
  const std::string entry = "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
  expect_rejected(make_file("\xEF\xBB\xBF" + entry, {7}),
                  {"the header starts with a UTF-8 byte-order mark (EF BB BF)"});
  expect_rejected(make_file("\xEF\xBB\xBF", {}), {"byte-order mark"});
  // Not a mark: the first two of its bytes only, which are invalid JSON.
  expect_rejected(make_file("\xEF\xBB" + entry, {7}), {"the header is not valid JSON"});
}

TEST(SafetensorsBadFile, NulBytesInTheHeader) {
  using namespace std::string_literals;
  const std::string entry = "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
  // As padding, and with anything behind it, which nlohmann never looked at.
  expect_rejected(make_file(entry + "\0\0\0"s, {7}),
                  {"the header holds a NUL byte at offset " + std::to_string(entry.size())});
  expect_rejected(make_file(entry + "\0garbage"s, {7}), {"NUL byte"});
  expect_rejected(make_file("\0"s + entry, {7}), {"the header holds a NUL byte at offset 0"});
  // Inside a name and as the whole header.
  expect_rejected(
      make_file("{\"w\0\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}"s, {7}),
      {"NUL byte at offset 3"});
  expect_rejected(make_file("\0"s, {}), {"NUL byte at offset 0"});
}

// What the reference accepts around the JSON: its writer pads with spaces, and serde_json takes
// JSON whitespace (space, tab, newline, carriage return) on either side.
TEST(SafetensorsBadFile, WhitespaceAroundTheHeaderIsNotAnError) {
  const std::string entry = "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
  for (const std::string& json : {entry + "       ", " \t\r\n" + entry, entry + "\n\t \r"}) {
    const SafetensorsFile file = parse_safetensors(make_file(json, {7}));
    ASSERT_EQ(file.tensors.size(), 1u);
    EXPECT_EQ(file.tensors.at("w").to_vec<std::uint8_t>(), std::vector<std::uint8_t>{7});
  }
  // Other padding is not whitespace in JSON.
  expect_rejected(make_file(entry + "\f", {7}), {"the header is not valid JSON"});
  expect_rejected(make_file(entry + "\v", {7}), {"the header is not valid JSON"});
}

TEST(SafetensorsBadFile, BoolBytesOtherThanZeroOrOne) {
  expect_rejected(
      make_file("{\"m\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]}}", {1, 0, 2}),
      {"BOOL tensor 'm' holds the byte 2 at element 2 (must be 0 or 1)"});
}

TEST(SafetensorsBadFile, HugeNamesAreShortenedInMessages) {
  const std::string name(5000, 'n');
  const std::vector<std::byte> file =
      make_file("{\"" + name + "\":{\"dtype\":\"F33\",\"shape\":[],\"data_offsets\":[0,0]}}", {});
  try {
    (void)parse_safetensors(file);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_LT(std::string(e.what()).size(), 400u);
    EXPECT_NE(std::string(e.what()).find("nnn...'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln::record
