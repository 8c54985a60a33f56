// CRC-32C against the published check values (RFC 3720 B.4 and the CRC catalogue's "123456789"),
// piecewise updates against one pass, and the tensor-map checksum's sensitivity.
#include "record/checksum.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <numeric>
#include <string_view>
#include <vector>

namespace kiln::record::detail {
namespace {

std::vector<std::byte> bytes_of(std::string_view text) {
  const auto view = std::as_bytes(std::span<const char>(text.data(), text.size()));
  return {view.begin(), view.end()};
}

TEST(Checksum, PublishedCheckValues) {
  EXPECT_EQ(crc32c({}), 0x00000000u);
  EXPECT_EQ(crc32c(bytes_of("123456789")), 0xE3069283u);
  std::vector<std::byte> zeros(32, std::byte{0x00}), ones(32, std::byte{0xFF}), up(32), down(32);
  for (std::size_t i = 0; i < 32; ++i) {
    up[i] = static_cast<std::byte>(i);
    down[i] = static_cast<std::byte>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down), 0x113FDB5Cu);
  EXPECT_EQ(checksum_text(0xE3069283u), "crc32c:e3069283");
  EXPECT_EQ(checksum_text(0x0000000Au), "crc32c:0000000a");
}

TEST(Checksum, PiecesGiveTheSameAsOnePass) {
  std::vector<std::byte> data(37);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 37 + 11);
  const std::uint32_t whole = crc32c(data);
  for (std::size_t cut = 0; cut <= data.size(); ++cut) {
    for (std::size_t second = cut; second <= data.size(); second += 5) {
      Crc32c crc;
      const std::span<const std::byte> all(data);
      crc.update(all.first(cut));
      crc.update(all.subspan(cut, second - cut));
      crc.update(all.subspan(second));
      EXPECT_EQ(crc.value(), whole) << cut << " " << second;
    }
  }
}

TEST(Checksum, EveryFlippedBitChangesIt) {
  std::vector<std::byte> data(100);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i);
  const std::uint32_t original = crc32c(data);
  for (std::size_t i = 0; i < data.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      data[i] ^= static_cast<std::byte>(1 << bit);
      EXPECT_NE(crc32c(data), original) << "byte " << i << " bit " << bit;
      data[i] ^= static_cast<std::byte>(1 << bit);
    }
  }
}

TEST(Checksum, TensorMapChecksumSeesNamesDTypesShapesAndBytes) {
  TensorMap base;
  base["a"] = TensorData::from_vec(std::vector<float>{1, 2, 3, 4}, {2, 2});
  base["b"] = TensorData::from_vec(std::vector<std::int32_t>{5});
  const std::string reference = tensors_checksum(base);
  EXPECT_EQ(reference.rfind("crc32c:", 0), 0u);
  EXPECT_EQ(reference.size(), 15u);
  EXPECT_EQ(tensors_checksum(TensorMap(base)), reference) << "equal maps, equal checksums";

  TensorMap renamed = base;
  renamed["c"] = renamed.at("b");
  renamed.erase("b");
  TensorMap reshaped = base;
  reshaped["a"] = TensorData::from_vec(std::vector<float>{1, 2, 3, 4}, {4, 1});
  TensorMap retyped = base;
  retyped["b"] = TensorData::from_vec(std::vector<float>{0});
  retyped["b"].bytes()[0] = base.at("b").bytes()[0];  // same four bytes, another dtype
  retyped["b"].bytes()[1] = base.at("b").bytes()[1];
  TensorMap changed = base;
  changed["a"].bytes()[15] ^= std::byte{0x01};
  TensorMap empty;
  for (const TensorMap* other : {&renamed, &reshaped, &retyped, &changed, &empty}) {
    EXPECT_NE(tensors_checksum(*other), reference);
  }
}

}  // namespace
}  // namespace kiln::record::detail
