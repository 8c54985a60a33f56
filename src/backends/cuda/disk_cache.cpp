#include "backends/cuda/disk_cache.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

namespace kiln::cuda {

namespace {

constexpr char kMagic[8] = {'k', 'i', 'l', 'n', 'c', 'b', 'n', '1'};

std::uint64_t mix(std::string_view text, std::uint64_t seed) {
  std::uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  // Final avalanche so nearby inputs spread over all bits.
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

std::uint64_t checksum(const char* data, std::size_t size) {
  return mix(std::string_view(data, size), 0x636b73756d);
}

}  // namespace

std::string content_hash(std::string_view text) {
  char out[33];
  std::snprintf(out, sizeof out, "%016llx%016llx", static_cast<unsigned long long>(mix(text, 0)),
                static_cast<unsigned long long>(mix(text, 0x9e3779b97f4a7c15ull)));
  return out;
}

const std::string& DiskCache::directory() {
  // Never destroyed: kernels may still be loaded while the process ends (shutdown.h).
  static const auto& dir = *new std::string([]() -> std::string {
    std::filesystem::path base;
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
      base = xdg;
    } else if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/') {
      base = std::filesystem::path(home) / ".cache";
    } else {
      return {};  // relative paths would land in the working directory: no disk cache instead
    }
    std::error_code error;
    const auto dir = base / "kiln" / "cuda";
    std::filesystem::create_directories(dir, error);
    return error ? std::string() : dir.string();
  }());
  return dir;
}

std::optional<std::vector<char>> DiskCache::load(const std::string& key) {
  if (directory().empty()) return std::nullopt;
  std::ifstream in(directory() + "/" + key + ".cubin", std::ios::binary);
  if (!in) return std::nullopt;
  char magic[8];
  std::uint64_t size = 0, sum = 0;
  if (!in.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return std::nullopt;
  if (!in.read(reinterpret_cast<char*>(&size), 8) || !in.read(reinterpret_cast<char*>(&sum), 8)) {
    return std::nullopt;
  }
  if (size == 0 || size > (std::uint64_t(1) << 30)) return std::nullopt;
  std::vector<char> image(size);
  if (!in.read(image.data(), static_cast<std::streamsize>(size))) return std::nullopt;
  if (checksum(image.data(), image.size()) != sum) return std::nullopt;
  return image;
}

void DiskCache::store(const std::string& key, const std::vector<char>& image) {
  if (directory().empty() || image.empty()) return;
  const std::string final_path = directory() + "/" + key + ".cubin";
  std::random_device random;
  const std::string temp_path =
      final_path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(random());
  {
    std::ofstream out(temp_path, std::ios::binary | std::ios::trunc);
    if (!out) return;
    const std::uint64_t size = image.size();
    const std::uint64_t sum = checksum(image.data(), image.size());
    out.write(kMagic, 8);
    out.write(reinterpret_cast<const char*>(&size), 8);
    out.write(reinterpret_cast<const char*>(&sum), 8);
    out.write(image.data(), static_cast<std::streamsize>(image.size()));
    if (!out.flush()) {
      out.close();
      std::remove(temp_path.c_str());
      return;
    }
  }
  // rename(2) is atomic on one file system: readers see the old file or the whole new one.
  if (std::rename(temp_path.c_str(), final_path.c_str()) != 0) std::remove(temp_path.c_str());
}

}  // namespace kiln::cuda
