// The GGUF reader refuses every malformed file with a typed error naming the file and the
// values, and the writer refuses what GGUF cannot hold.
#include <gtest/gtest.h>
#include <kiln/quant.h>
#include <kiln/record/gguf.h>

#include "record/gguf_test_util.h"
#include "support/error_message.h"

namespace kiln::record {
namespace {

using testing::GgufBuilder;

template <class E = InvalidArgument>
void expect_refused(const GgufBuilder& b, const std::string& text) {
  const std::string message =
      kiln::test::message_of<E>([&] { (void)parse_gguf(b.bytes(), "bad.gguf"); });
  EXPECT_EQ(message.rfind("[parse_gguf] bad.gguf: ", 0), 0u) << message;
  EXPECT_NE(message.find(text), std::string::npos) << message;
}

// A valid file with one 4x32 Q8_0 tensor, for truncation.
GgufBuilder valid_file() {
  GgufBuilder b;
  b.start(1, 2).str("a").u32(9).u32(4).u64(2).u32(1).u32(2).str("s").u32(8).str("text");
  b.tensor("t", {32, 4}, 8, 0).pad(32).zeros(4 * 34);
  return b;
}

TEST(GgufBadFile, EveryTruncationIsRefused) {
  const std::vector<std::byte> bytes = valid_file().bytes();
  ASSERT_NO_THROW((void)parse_gguf(bytes));
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW((void)parse_gguf(std::span(bytes).first(n)), InvalidArgument) << n;
  }
}

TEST(GgufBadFile, HeaderProblems) {
  expect_refused(GgufBuilder().u32(0x12345678).u32(3).u64(0).u64(0),
                 "not a GGUF file (magic 0x12345678)");
  expect_refused(GgufBuilder().start(0, 0, 1), "GGUF version 1 is not supported");
  expect_refused(GgufBuilder().start(0, 0, 0x03000000), "a big-endian file?");
  expect_refused(GgufBuilder().start(0, std::uint64_t{1} << 62),
                 "4611686018427387904 metadata entries cannot fit");
  expect_refused(GgufBuilder().start(~std::uint64_t{0}, 0), "tensor entries cannot fit");
}

TEST(GgufBadFile, MetadataProblems) {
  expect_refused(GgufBuilder().start(0, 1).str("k").u32(13).u8(0), "unknown value type 13");
  expect_refused(GgufBuilder().start(0, 1).str("k").u32(7).u8(2), "bool byte 2");
  expect_refused(GgufBuilder().start(0, 1).str("k").u32(8).u64(100).zeros(8), "of 100 bytes");
  expect_refused(GgufBuilder().start(0, 2).str("k").u32(0).u8(1).str("k").u32(0).u8(2),
                 "metadata key 'k' appears twice");
  expect_refused(GgufBuilder().start(0, 1).str("k").u32(9).u32(4).u64(std::uint64_t{1} << 60),
                 "values of 'k' cannot fit");
  expect_refused(GgufBuilder().start(0, 1).str("k").u32(9).u32(77).u64(0),
                 "array of unknown value type 77");
  GgufBuilder deep;
  deep.start(0, 1).str("k").u32(9);
  for (int i = 0; i < 9; ++i) deep.u32(9).u64(1);
  deep.u32(0).u64(0);
  expect_refused(deep, "nests arrays more than 8 deep");
  expect_refused(GgufBuilder().start(0, 1).str("general.alignment").u32(6).u32(0),
                 "general.alignment is a float32, not a uint32");
  expect_refused(GgufBuilder().start(0, 1).str("general.alignment").u32(4).u32(48),
                 "general.alignment is 48, not a power of two");
}

TEST(GgufBadFile, TensorProblems) {
  auto one = [](const std::vector<std::uint64_t>& dims, std::uint32_t type, std::uint64_t offset,
                std::size_t data) {
    GgufBuilder b;
    b.start(1, 0).tensor("w", dims, type, offset).pad(32).zeros(data);
    return b;
  };
  expect_refused(one({1, 1, 1, 1, 1}, 0, 0, 4), "has 5 dims, more than 4");
  expect_refused(one({~std::uint64_t{0}}, 0, 0, 4), "has dim 18446744073709551615");
  expect_refused(one({std::uint64_t{1} << 40, std::uint64_t{1} << 40}, 0, 0, 4),
                 "tensor 'w' of shape [1099511627776, 1099511627776]");
  expect_refused(one({4}, 200, 0, 16), "unknown ggml type 200");
  expect_refused<UnsupportedDType>(one({256}, 16, 0, 66), "is IQ2_XXS (ggml type 16)");
  expect_refused(one({33}, 8, 0, 64), "not a multiple of Q8_0's 32 values per block");
  expect_refused(one({4}, 0, 8, 32), "at offset 8 is not aligned to 32");
  expect_refused(one({4}, 0, 0, 15), "of 16 bytes at offset 0 runs past the data's 15 bytes");
  expect_refused(one({4}, 0, ~std::uint64_t{0} - 31, 16), "runs past");
  GgufBuilder twice;
  twice.start(2, 0).tensor("w", {4}, 0, 0).tensor("w", {4}, 0, 32).pad(32).zeros(64);
  expect_refused(twice, "tensor 'w' appears twice");
  GgufBuilder overlap;
  overlap.start(2, 0).tensor("a", {16}, 0, 0).tensor("b", {4}, 0, 32).pad(32).zeros(64);
  expect_refused(overlap, "tensors 'a' and 'b' overlap");
}

TEST(GgufBadFile, MissingFilesAreNamed) {
  const std::string message =
      kiln::test::message_of<InvalidArgument>([] { (void)load_gguf("/nonexistent/x.gguf"); });
  EXPECT_EQ(message, "[load_gguf] /nonexistent/x.gguf: cannot read: no such file");
}

TEST(GgufWrite, RefusesWhatGgufCannotHold) {
  auto refused = [](GgufFile file, const std::string& text) {
    std::string message =
        kiln::test::message_of<UnsupportedDType>([&] { (void)serialize_gguf(file); });
    if (message.find("another error") != std::string::npos || message == "no error") {
      message = kiln::test::message_of<InvalidArgument>([&] { (void)serialize_gguf(file); });
    }
    EXPECT_EQ(message.rfind("[serialize_gguf] <memory>: ", 0), 0u) << message;
    EXPECT_NE(message.find(text), std::string::npos) << message;
  };
  refused({{{"u", TensorData::from_vec(std::vector<std::uint8_t>{1}, Shape{1})}}, {}},
          "tensor 'u' is u8, which GGUF has no type for");
  refused({{{"q", TensorData::from_vec(std::vector<float>(4, 1.0f), Shape{4})
                      .quantize(int8_channel_scheme())}},
           {}},
          "tensor 'q' is int8_channel");
  refused({{{"r", TensorData::from_vec(std::vector<float>(1), Shape{1, 1, 1, 1, 1})}}, {}},
          "has more than 4 dims");
  refused({{}, {{"a", GgufValue(GgufArray{GgufType::Int32, {GgufValue(1.0f)}})}}},
          "metadata 'a' is an array of int32 holding a float32");
  refused({{}, {{"general.alignment", GgufValue(std::uint32_t{3})}}}, "not a power of two");
}

}  // namespace
}  // namespace kiln::record
