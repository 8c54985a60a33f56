// What the safetensors reader and writer share: the dtype names, the reference's layout order
// and the checked description of one file's header.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/record/safetensors.h"
#include "kiln/shape.h"

namespace kiln::record::detail {

// The name safetensors writes for a dtype; UnsupportedDType for QFloat.
std::string_view safetensors_dtype_name(DType dtype, std::string_view op);
// The dtype a safetensors name stands for, if kiln holds it.
std::optional<DType> dtype_from_safetensors_name(std::string_view name) noexcept;
// True for names the format defines but kiln cannot hold (F8_E4M3, C64, ...).
bool is_foreign_safetensors_dtype(std::string_view name) noexcept;
// The reference writer's order of tensors in the data buffer: higher ranks first, then by
// name. The rank follows its dtype enumeration, which puts wider elements first.
int layout_rank(DType dtype) noexcept;

// One tensor's header entry after every check.
struct TensorEntry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin;  // offsets into the data buffer
  std::uint64_t end;
};

struct Header {
  std::vector<TensorEntry> tensors;  // in data-buffer order
  Metadata metadata;
};

// Checks that a file of file_size bytes can hold the 8-byte header length.
void check_prefix(std::uint64_t file_size, std::string_view op, std::string_view origin);
// Checks a file's declared header length against its size; returns the data buffer's size.
std::uint64_t check_header_length(std::uint64_t header_length, std::uint64_t file_size,
                                  std::string_view op, std::string_view origin);
// Parses and checks the JSON header against a data buffer of data_size bytes.
Header parse_header(std::span<const std::byte> json, std::uint64_t data_size, std::string_view op,
                    std::string_view origin);
// Rejects BOOL tensors whose bytes are not 0 or 1.
void check_bool_bytes(const TensorEntry& entry, std::span<const std::byte> bytes,
                      std::string_view op, std::string_view origin);

// The 8-byte length prefix, little-endian whatever the host.
std::uint64_t read_u64_le(std::span<const std::byte, 8> bytes) noexcept;

}  // namespace kiln::record::detail
