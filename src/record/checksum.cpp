#include "record/checksum.h"

#include <array>
#include <cstdio>
#include <cstring>

#include "kiln/dtype.h"

namespace kiln::record::detail {
namespace {

// Slicing by 8: table[k][b] is the CRC of byte b followed by k zero bytes, so eight input
// bytes are folded in with eight lookups instead of eight dependent steps.
using Tables = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  constexpr std::uint32_t kPolynomial = 0x82F63B78u;  // Castagnoli, bit-reflected
  Tables tables{};
  for (std::uint32_t b = 0; b < 256; ++b) {
    std::uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kPolynomial : 0u);
    tables[0][b] = crc;
  }
  for (std::size_t k = 1; k < 8; ++k) {
    for (std::size_t b = 0; b < 256; ++b) {
      const std::uint32_t previous = tables[k - 1][b];
      tables[k][b] = (previous >> 8) ^ tables[0][previous & 0xFFu];
    }
  }
  return tables;
}

constexpr Tables kTables = make_tables();

void update_u64(Crc32c& crc, std::uint64_t value) {
  std::array<std::byte, 8> bytes;
  for (std::size_t i = 0; i < 8; ++i) bytes[i] = static_cast<std::byte>((value >> (8 * i)) & 0xFF);
  crc.update(bytes);
}

void update_text(Crc32c& crc, std::string_view text) {
  update_u64(crc, text.size());  // the length first, so "ab"+"c" and "a"+"bc" differ
  crc.update(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

}  // namespace

void Crc32c::update(std::span<const std::byte> bytes) noexcept {
  std::uint32_t crc = state_;
  const std::byte* p = bytes.data();
  std::size_t n = bytes.size();
  for (; n >= 8; p += 8, n -= 8) {
    std::uint64_t word = 0;
    for (int i = 0; i < 8; ++i) word |= static_cast<std::uint64_t>(p[i]) << (8 * i);
    word ^= crc;
    crc = kTables[7][word & 0xFF] ^ kTables[6][(word >> 8) & 0xFF] ^
          kTables[5][(word >> 16) & 0xFF] ^ kTables[4][(word >> 24) & 0xFF] ^
          kTables[3][(word >> 32) & 0xFF] ^ kTables[2][(word >> 40) & 0xFF] ^
          kTables[1][(word >> 48) & 0xFF] ^ kTables[0][word >> 56];
  }
  for (; n > 0; ++p, --n) {
    crc = (crc >> 8) ^ kTables[0][(crc ^ static_cast<std::uint32_t>(*p)) & 0xFF];
  }
  state_ = crc;
}

std::uint32_t crc32c(std::span<const std::byte> bytes) noexcept {
  Crc32c crc;
  crc.update(bytes);
  return crc.value();
}

std::string checksum_text(std::uint32_t crc) {
  char text[24];
  std::snprintf(text, sizeof text, "crc32c:%08x", crc);
  return text;
}

std::string tensors_checksum(const TensorMap& tensors) {
  Crc32c crc;
  for (const auto& [name, data] : tensors) {
    update_text(crc, name);
    update_text(crc, dtype_name(data.dtype()));
    update_u64(crc, data.shape().rank());
    for (std::int64_t dim : data.shape().dims()) update_u64(crc, static_cast<std::uint64_t>(dim));
    update_u64(crc, data.bytes().size());
    crc.update(data.bytes());
  }
  return checksum_text(crc.value());
}

}  // namespace kiln::record::detail
