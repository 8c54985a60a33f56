// GGUF files (version 3, as llama.cpp and the `gguf` Python package write them): typed metadata
// and named tensors, quantized ones kept in their blocks.
//
//   record::GgufFile file = record::load_gguf("model.gguf");
//   const TensorData& w = file.tensors.at("blk.0.attn_q.weight");   // QFloat, or a float dtype
//   if (w.dtype() == DType::QFloat) TensorData f = w.dequantize();   // F32, same shape
//   std::uint32_t layers = file.metadata.at("llama.block_count").get<std::uint32_t>();
//   file.metadata["general.name"] = record::GgufValue(std::string("mine"));
//   record::save_gguf("copy.gguf", file);
//
// Shapes are row-major with the innermost dim last, as the gguf package's reader returns them
// (GGUF stores the dims innermost first; they are reversed on read and on write), so a Q8_0
// matrix of 4096 rows of 11008 values is [4096, 11008] and its blocks run along the last dim.
// Tensor types: F32, F16, BF16, F64, I8, I16, I32 and I64 load as those dtypes; Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and Q8_K as QFloat with that scheme. Other
// GGUF types (IQ*, TQ*, Q8_1, ...) throw UnsupportedDType naming the tensor and the type.
//
// The reader trusts nothing in the file: every count, length, offset, dim and type is checked
// (with overflow-safe arithmetic) before it is used or allocated, and a bad file throws
// InvalidArgument naming the file, the entry and the values, e.g.
//   [load_gguf] m.gguf: tensor 'w' of 64 bytes at offset 96 runs past the data's 128 bytes
// It accepts versions 2 and 3 (the same layout); general.alignment, when present, is a uint32
// power of two; at most 4 dims per tensor (ggml's limit) and arrays nested at most 8 deep; keys
// and tensor names are unique; tensors lie inside the data section, at multiples of the
// alignment, without overlapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/data.h"

namespace kiln::record {

// GGUF's metadata value type ids, pinned.
enum class GgufType : std::uint32_t {
  UInt8 = 0,
  Int8 = 1,
  UInt16 = 2,
  Int16 = 3,
  UInt32 = 4,
  Int32 = 5,
  Float32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  UInt64 = 10,
  Int64 = 11,
  Float64 = 12,
};

class GgufValue;

// A metadata array: GGUF gives every array one element type, kept even when it is empty.
struct GgufArray {
  GgufType element_type = GgufType::UInt8;
  std::vector<GgufValue> values;  // each of element_type (arrays may nest)
  bool operator==(const GgufArray& other) const;
};

// One metadata value: a scalar of one of GGUF's types, a string or an array.
//   GgufValue(std::uint32_t{32}); GgufValue(std::string("llama")); GgufValue(3.5f);
//   GgufValue(GgufArray{GgufType::String, {GgufValue(std::string("a"))}});
//   value.type() == GgufType::UInt32; value.get<std::uint32_t>();
class GgufValue {
 public:
  // The alternatives in GgufType order.
  using Storage = std::variant<std::uint8_t, std::int8_t, std::uint16_t, std::int16_t,
                               std::uint32_t, std::int32_t, float, bool, std::string, GgufArray,
                               std::uint64_t, std::int64_t, double>;

  GgufValue() = default;  // uint8 0
  template <class T>
  requires std::is_constructible_v<Storage, T&&> &&
      (!std::is_same_v<std::remove_cvref_t<T>, GgufValue>)explicit GgufValue(T&& value)
      : value_(std::forward<T>(value)) {}

  GgufType type() const noexcept { return static_cast<GgufType>(value_.index()); }
  const Storage& value() const noexcept { return value_; }
  // The value as T, which must be its exact type; InvalidArgument naming both types otherwise.
  template <class T>
  const T& get() const {
    if (const T* held = std::get_if<T>(&value_)) return *held;
    fail_type(static_cast<GgufType>(index_of<T>()));
  }

  bool operator==(const GgufValue& other) const { return value_ == other.value_; }

 private:
  template <class T, std::size_t I = 0>
  static constexpr std::size_t index_of() {
    if constexpr (std::is_same_v<T, std::variant_alternative_t<I, Storage>>) {
      return I;
    } else {
      return index_of<T, I + 1>();
    }
  }
  [[noreturn]] void fail_type(GgufType requested) const;
  Storage value_;
};

// "uint8", ..., "float64".
std::string_view gguf_type_name(GgufType type) noexcept;

using GgufMetadata = std::map<std::string, GgufValue>;

struct GgufFile {
  std::map<std::string, TensorData> tensors;
  GgufMetadata metadata;
};

// The data alignment a file uses when its metadata does not name one.
inline constexpr std::uint32_t kGgufDefaultAlignment = 32;

// Reads a whole file; the tensors are read straight into their own buffers.
[[nodiscard]] GgufFile load_gguf(const std::filesystem::path& path);
// Parses a whole file already in memory; origin names it in error messages.
[[nodiscard]] GgufFile parse_gguf(std::span<const std::byte> bytes,
                                  std::string_view origin = "<memory>");

// Writes a GGUF v3 file atomically (as save_safetensors does): metadata keys and tensors in
// name order, each tensor's data padded to the alignment (general.alignment if present, a uint32
// power of two, else 32). InvalidArgument for a bad alignment value or an array whose values
// are not all of its element type; UnsupportedDType for dtypes GGUF has no type for (unsigned
// ints, bool) and for kiln's own int8 schemes.
void save_gguf(const std::filesystem::path& path, const GgufFile& file);
// The same bytes save_gguf writes, in memory.
[[nodiscard]] std::vector<std::byte> serialize_gguf(const GgufFile& file);

}  // namespace kiln::record
