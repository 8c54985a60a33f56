#include "record/input_file.h"

#include <cerrno>
#include <system_error>

#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::record::detail {

InputFile::InputFile(const std::filesystem::path& path, std::string_view op)
    : op_(op), origin_(path.string()) {
  auto fail = [&](auto... parts) {
    kiln::detail::fail<InvalidArgument>(op_, origin_, ": ", parts...);
  };
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

void InputFile::read_at(std::uint64_t offset, std::span<std::byte> out) {
  if (out.empty()) return;
  if (offset != position_) in_.seekg(static_cast<std::streamoff>(offset));
  in_.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
  if (!in_ || static_cast<std::size_t>(in_.gcount()) != out.size()) {
    in_.clear();
    position_ = ~std::uint64_t{0};  // seek before the next read
    kiln::detail::fail<InvalidArgument>(op_, origin_, ": read failed at byte ", offset, " of ",
                                        size_, " (file truncated while reading?)");
  }
  position_ = offset + out.size();
}

}  // namespace kiln::record::detail
