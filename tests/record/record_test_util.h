// Helpers for the record tests: scratch files and safetensors files built by hand.
#pragma once

#include <gtest/gtest.h>
#include <kiln/data.h>
#include <kiln/shape.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::record::testing {

// A tensor of 16-bit floats (T: half or bfloat16) from their bit patterns.
template <class T>
TensorData from_bits(const std::vector<std::uint16_t>& bits, Shape shape) {
  std::vector<T> values;
  for (std::uint16_t b : bits) values.push_back(T::from_bits(b));
  return TensorData::from_vec(values, std::move(shape));
}

// A fresh directory per test, removed at the end.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            (std::string("kiln_record_") + info->test_suite_name() + "_" + info->name() + "_" +
             std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline std::vector<std::byte> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  if (!chars.empty()) std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

inline void write_bytes(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// The 8-byte little-endian length, written out byte by byte as the format describes it.
inline void append_u64_le(std::vector<std::byte>& out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((value >> (8 * i)) & 0xff));
}

// A file from its parts: the declared header length (by default the JSON's), the JSON text and
// the data buffer.
inline std::vector<std::byte> make_file(std::string_view json,
                                        const std::vector<std::uint8_t>& data,
                                        std::optional<std::uint64_t> declared_length = {}) {
  std::vector<std::byte> out;
  append_u64_le(out, declared_length.value_or(json.size()));
  for (char c : json) out.push_back(static_cast<std::byte>(c));
  for (std::uint8_t b : data) out.push_back(static_cast<std::byte>(b));
  return out;
}

inline std::filesystem::path fixture(std::string_view name) {
  return std::filesystem::path(KILN_TEST_SOURCE_DIR) / "record" / "fixtures" / name;
}

}  // namespace kiln::record::testing
