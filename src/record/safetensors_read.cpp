// Reading safetensors from memory and from files. Files are read piecewise (prefix, header,
// then each tensor straight into its own buffer) so loading a model needs no second copy of it,
// and nothing is allocated before the sizes it depends on have been checked against the file.
#include <bit>

#include "core/buffer.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"
#include "kiln/record/safetensors.h"
#include "record/input_file.h"
#include "record/safetensors_format.h"

namespace kiln::record {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and is copied without byte swapping");

TensorData make_tensor(const detail::TensorEntry& entry, std::vector<std::byte> bytes) {
  return TensorData(std::move(bytes), entry.shape, entry.dtype);
}

class FileReader {
 public:
  FileReader(const std::filesystem::path& path, std::string_view op) : op_(op), file_(path, op) {}

  SafetensorsFile read() {
    const std::string& origin = file_.origin();
    detail::check_prefix(file_.size(), op_, origin);
    std::byte prefix[8];
    file_.read_at(0, prefix);
    const std::uint64_t header_length = detail::read_u64_le(std::span<const std::byte, 8>(prefix));
    const std::uint64_t data_size =
        detail::check_header_length(header_length, file_.size(), op_, origin);
    std::vector<std::byte> json(header_length);
    file_.read_at(8, json);
    detail::Header header = detail::parse_header(json, data_size, op_, origin);

    SafetensorsFile file{{}, std::move(header.metadata)};
    const std::uint64_t data_start = 8 + header_length;
    for (detail::TensorEntry& entry : header.tensors) {
      std::vector<std::byte> bytes = kiln::detail::allocate_bytes(entry.end - entry.begin);
      file_.read_at(data_start + entry.begin, bytes);
      detail::check_bool_bytes(entry, bytes, op_, origin);
      file.tensors.emplace(std::move(entry.name), make_tensor(entry, std::move(bytes)));
    }
    return file;
  }

 private:
  std::string_view op_;
  detail::InputFile file_;
};

}  // namespace

SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, std::string_view origin) {
  constexpr std::string_view kOp = "parse_safetensors";
  detail::check_prefix(bytes.size(), kOp, origin);
  const std::uint64_t header_length = detail::read_u64_le(bytes.first<8>());
  const std::uint64_t data_size =
      detail::check_header_length(header_length, bytes.size(), kOp, origin);
  detail::Header header =
      detail::parse_header(bytes.subspan(8, header_length), data_size, kOp, origin);

  const std::span<const std::byte> data = bytes.subspan(8 + header_length);
  SafetensorsFile file{{}, std::move(header.metadata)};
  for (detail::TensorEntry& entry : header.tensors) {
    const std::span<const std::byte> view = data.subspan(entry.begin, entry.end - entry.begin);
    detail::check_bool_bytes(entry, view, kOp, origin);
    file.tensors.emplace(std::move(entry.name),
                         make_tensor(entry, std::vector<std::byte>(view.begin(), view.end())));
  }
  return file;
}

SafetensorsFile load_safetensors_with_metadata(const std::filesystem::path& path) {
  return FileReader(path, "load_safetensors").read();
}

TensorMap load_safetensors(const std::filesystem::path& path) {
  return load_safetensors_with_metadata(path).tensors;
}

}  // namespace kiln::record
