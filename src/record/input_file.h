// A file the record readers read piecewise: opened with checks that name it, its size taken
// once, and every read checked, since the file may change while it is read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <string_view>

namespace kiln::record::detail {

class InputFile {
 public:
  // InvalidArgument "[op] path: ..." if path is missing, not a regular file or unreadable.
  InputFile(const std::filesystem::path& path, std::string_view op);

  std::uint64_t size() const noexcept { return size_; }
  const std::string& origin() const noexcept { return origin_; }
  // Reads out.size() bytes at offset; InvalidArgument on a short read. Reads that follow each
  // other need no seek, which would drop the stream's buffer (a header of many small fields).
  void read_at(std::uint64_t offset, std::span<std::byte> out);

 private:
  std::string_view op_;
  std::string origin_;
  std::uint64_t size_ = 0;
  std::uint64_t position_ = 0;
  std::ifstream in_;
};

}  // namespace kiln::record::detail
