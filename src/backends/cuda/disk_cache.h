// The on-disk cache of compiled kernels: one file per kernel under $XDG_CACHE_HOME/kiln/cuda
// (else ~/.cache/kiln/cuda; never the working directory). Files are written to a temporary name
// and renamed, so a reader never sees half a file; each carries a checksum, and a file that does
// not match is treated as absent (and rewritten by the next compile).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::cuda {

// 128-bit content hash (two independent 64-bit FNV-1a-style mixes), as 32 hex digits.
std::string content_hash(std::string_view text);

class DiskCache {
 public:
  // The cache directory; empty disables the disk cache (no HOME and no XDG_CACHE_HOME).
  static const std::string& directory();
  static std::optional<std::vector<char>> load(const std::string& key);
  // Best effort: a cache that cannot be written only costs a compile next time.
  static void store(const std::string& key, const std::vector<char>& image);
};

}  // namespace kiln::cuda
