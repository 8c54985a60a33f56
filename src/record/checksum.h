// Checksums of what kiln records: CRC-32C (Castagnoli), which detects every error burst of up
// to 32 bits (so every flipped byte) in a file. Used for checkpoint integrity and for the
// fingerprint of a run's input data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kiln/record/safetensors.h"

namespace kiln::record::detail {

// A running CRC-32C over bytes fed in pieces.
class Crc32c {
 public:
  void update(std::span<const std::byte> bytes) noexcept;
  std::uint32_t value() const noexcept { return ~state_; }

 private:
  std::uint32_t state_ = 0xFFFFFFFFu;
};

std::uint32_t crc32c(std::span<const std::byte> bytes) noexcept;

// "crc32c:" and eight lowercase hex digits.
std::string checksum_text(std::uint32_t crc);

// The checksum of a tensor map's content: every tensor's name, dtype, shape and bytes in name
// order. It depends on the tensors only, not on a file's layout, so a writer can store it in
// the file's metadata and a reader recompute it from what it loaded.
std::string tensors_checksum(const TensorMap& tensors);

}  // namespace kiln::record::detail
