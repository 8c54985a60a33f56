// GGUF files built field by field for the tests, as the format describes them, independently of
// kiln's writer.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "record/record_test_util.h"

namespace kiln::record::testing {

class GgufBuilder {
 public:
  GgufBuilder& u8(std::uint8_t v) { return le(v, 1); }
  GgufBuilder& u16(std::uint16_t v) { return le(v, 2); }
  GgufBuilder& u32(std::uint32_t v) { return le(v, 4); }
  GgufBuilder& u64(std::uint64_t v) { return le(v, 8); }
  GgufBuilder& str(std::string_view s) {
    u64(s.size());
    for (char c : s) bytes_.push_back(static_cast<std::byte>(c));
    return *this;
  }
  // The file's start: magic, version and the two counts.
  GgufBuilder& start(std::uint64_t tensors, std::uint64_t kvs, std::uint32_t version = 3) {
    return u32(0x46554747).u32(version).u64(tensors).u64(kvs);
  }
  // A tensor entry: dims innermost first, as GGUF stores them.
  GgufBuilder& tensor(std::string_view name, const std::vector<std::uint64_t>& dims,
                      std::uint32_t type, std::uint64_t offset) {
    str(name).u32(static_cast<std::uint32_t>(dims.size()));
    for (std::uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
  GgufBuilder& pad(std::size_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back(std::byte{0});
    return *this;
  }
  GgufBuilder& zeros(std::size_t n) {
    bytes_.resize(bytes_.size() + n);
    return *this;
  }
  const std::vector<std::byte>& bytes() const { return bytes_; }

 private:
  GgufBuilder& le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes_.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
    return *this;
  }
  std::vector<std::byte> bytes_;
};

}  // namespace kiln::record::testing
