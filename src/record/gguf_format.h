// What the GGUF reader and writer share: the file's constants and ggml's tensor type ids.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "kiln/data.h"
#include "kiln/record/gguf.h"

namespace kiln::record::detail {

inline constexpr std::uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr std::uint32_t kGgufVersion = 3;
inline constexpr std::size_t kGgufMaxDims = 4;  // ggml's GGML_MAX_DIMS
inline constexpr int kGgufMaxArrayDepth = 8;    // arrays of arrays of ...
inline constexpr std::string_view kGgufAlignmentKey = "general.alignment";

// A tensor's element type in kiln's terms: a dtype, and the scheme when it is QFloat.
struct GgufTensorType {
  DType dtype;
  QuantScheme scheme;
};

// ggml's name for a tensor type id ("Q4_K", "IQ2_XXS", ...), empty when the id is unknown.
std::string_view ggml_type_name(std::uint32_t id) noexcept;
// The kiln type of a ggml type id, if kiln holds it.
std::optional<GgufTensorType> tensor_type_from_ggml(std::uint32_t id) noexcept;
// The ggml type id of data, if GGUF has one for it.
std::optional<std::uint32_t> ggml_type_of(const TensorData& data) noexcept;

// Bytes of one scalar of a metadata type (0 for String and Array, whose size varies).
std::size_t gguf_scalar_size(GgufType type) noexcept;
// True for the type ids 0-12.
bool is_gguf_type(std::uint32_t id) noexcept;

// The data section's alignment named by metadata (32 without the key); InvalidArgument naming
// op and origin unless the value is a uint32 power of two.
std::uint32_t gguf_alignment(const GgufMetadata& metadata, std::string_view op,
                             std::string_view origin);

}  // namespace kiln::record::detail
