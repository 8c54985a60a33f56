// safetensors files: named tensors plus optional string metadata, the format PyTorch, JAX and
// Hugging Face use to exchange weights.
//
//   std::map<std::string, TensorData> tensors;
//   tensors["w"] = TensorData::from_vec(std::vector<float>{1, 2, 3, 4}, {2, 2});
//   record::save_safetensors("model.safetensors", tensors, {{"format", "pt"}});
//   auto loaded = record::load_safetensors("model.safetensors");   // loaded.at("w")
//   auto file = record::load_safetensors_with_metadata("model.safetensors");  // file.metadata
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON
//   {"__metadata__": {"k": "v"}, "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}
// then the data buffer; offsets are relative to it, values little-endian and row-major.
//
// The writer is deterministic and byte-identical to the reference implementation (Python/Rust
// `safetensors`) for the same tensors and metadata keys in sorted order: tensors are laid out
// by element size, largest first (so each tensor is aligned to its element size), then by name;
// the header is compact JSON padded with spaces to a multiple of 8 bytes.
//
// The reader trusts nothing in the file: every size, offset, shape and type is checked before
// use and a bad file throws InvalidArgument naming the file and the problem, e.g.
//   [load_safetensors] model.safetensors: tensor 'w' has data_offsets [0, 12] but shape [2, 2]
//   F32 needs 16 bytes
// It accepts exactly what the reference accepts (the header is UTF-8 JSON text, possibly with
// JSON whitespace around it, so no byte-order mark and no NUL byte; the tensors tile the data
// buffer with no gap, overlap or trailing byte), except that it rejects BOOL bytes other than 0
// and 1, duplicate JSON keys and unknown fields in a tensor entry. Tensors of dtypes safetensors
// knows but kiln does not hold (F8_E4M3, C64, ...) throw UnsupportedDType. Parsing takes time
// linear in the header's size (100,000 tensors in well under a second).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/data.h"

namespace kiln::record {

using TensorMap = std::map<std::string, TensorData>;
using Metadata = std::map<std::string, std::string>;

// The whole content of a file: its tensors and its "__metadata__" strings.
struct SafetensorsFile {
  TensorMap tensors;
  Metadata metadata;
};

// The largest header the reader accepts (the reference's limit): more is a corrupt length.
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Writes tensors (and metadata, if any) to path atomically: into a fresh temporary beside path
// (a unique name, created exclusively, never following a link), flushed to the disk and renamed
// over path. A failed save leaves any previous file intact and no temporary; saves racing on one
// path each leave a whole file. InvalidArgument naming the path and the system's reason if the
// file cannot be written, or if a name is "__metadata__" or not UTF-8; UnsupportedDType for QFloat.
void save_safetensors(const std::filesystem::path& path, const TensorMap& tensors,
                      const Metadata& metadata = {});
// The same bytes save_safetensors writes, in memory.
[[nodiscard]] std::vector<std::byte> serialize_safetensors(const TensorMap& tensors,
                                                           const Metadata& metadata = {});

// Reads every tensor of a file (the metadata is skipped).
[[nodiscard]] TensorMap load_safetensors(const std::filesystem::path& path);
// Reads every tensor and the metadata of a file.
[[nodiscard]] SafetensorsFile load_safetensors_with_metadata(const std::filesystem::path& path);
// Parses a whole file already in memory; origin names it in error messages.
[[nodiscard]] SafetensorsFile parse_safetensors(std::span<const std::byte> bytes,
                                                std::string_view origin = "<memory>");

}  // namespace kiln::record
