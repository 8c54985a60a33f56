// Reading safetensors from memory and from files. Files are read piecewise (prefix, header,
// then each tensor straight into its own buffer) so loading a model needs no second copy of it,
// and nothing is allocated before the sizes it depends on have been checked against the file.
#include <bit>
#include <cerrno>
#include <fstream>
#include <system_error>

#include "core/buffer.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"
#include "kiln/record/safetensors.h"
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
  FileReader(const std::filesystem::path& path, std::string_view op)
      : op_(op), origin_(path.string()) {
    std::error_code error;
    const std::filesystem::file_status status = std::filesystem::status(path, error);
    if (error || !std::filesystem::exists(status)) fail("cannot read: no such file");
    if (!std::filesystem::is_regular_file(status)) fail("cannot read: not a regular file");
    size_ = std::filesystem::file_size(path, error);
    if (error) fail("cannot read: ", error.message());
    errno = 0;
    in_.open(path, std::ios::binary);
    if (!in_) fail("cannot open: ", std::generic_category().message(errno));
  }

  SafetensorsFile read() {
    detail::check_prefix(size_, op_, origin_);
    std::byte prefix[8];
    read_at(0, prefix);
    const std::uint64_t header_length = detail::read_u64_le(std::span<const std::byte, 8>(prefix));
    const std::uint64_t data_size = detail::check_header_length(header_length, size_, op_, origin_);
    std::vector<std::byte> json(header_length);
    read_at(8, json);
    detail::Header header = detail::parse_header(json, data_size, op_, origin_);

    SafetensorsFile file{{}, std::move(header.metadata)};
    const std::uint64_t data_start = 8 + header_length;
    for (detail::TensorEntry& entry : header.tensors) {
      std::vector<std::byte> bytes = kiln::detail::allocate_bytes(entry.end - entry.begin);
      read_at(data_start + entry.begin, bytes);
      detail::check_bool_bytes(entry, bytes, op_, origin_);
      file.tensors.emplace(std::move(entry.name), make_tensor(entry, std::move(bytes)));
    }
    return file;
  }

 private:
  template <class... Parts>
  [[noreturn]] void fail(Parts&&... parts) const {
    kiln::detail::fail<InvalidArgument>(op_, origin_, ": ", std::forward<Parts>(parts)...);
  }

  // The file may have changed since its size was taken; a short read is reported, not trusted.
  void read_at(std::uint64_t offset, std::span<std::byte> out) {
    if (out.empty()) return;
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
    if (!in_ || static_cast<std::size_t>(in_.gcount()) != out.size()) {
      fail("read failed at byte ", offset, " of ", size_, " (file truncated while reading?)");
    }
  }

  std::string_view op_;
  std::string origin_;
  std::uint64_t size_ = 0;
  std::ifstream in_;
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
