// Run-time compilation of generated kernels with NVRTC, for the device's exact architecture
// (--gpu-architecture=sm_XX, or sm_90a on 9.0: Context::compile_arch; cubin). Three levels: kernels
// already loaded in this process (by a short key the caller builds, so the source is generated only
// on a miss), the disk cache (by a hash of source, architecture, NVRTC and driver versions), and
// NVRTC itself.
//
// Every op asks for its kernel, so a loaded kernel is found without a lock and without an
// allocation: an open-addressed table of immutable entries that readers probe with atomic
// loads; writers (under the mutex) publish new entries, and a grown or cleared table is kept
// until the compiler goes, since a reader may still be probing it.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "runtime/cuda_plugin.h"

namespace kiln::cuda {

class Context;

class Compiler {
 public:
  explicit Compiler(Context& context);
  ~Compiler();
  Compiler(const Compiler&) = delete;
  Compiler& operator=(const Compiler&) = delete;

  // The function `name` of the module whose source make_source() returns; key names that source
  // uniquely (e.g. "binary:add:f32"). make_source runs only when no module of that key is loaded.
  template <class MakeSource>
  CUfunction function(std::string_view key, const char* name, MakeSource&& make_source) {
    const std::uint64_t hash = hash_key(key, name);
    if (CUfunction found = find(hash, key, name)) return found;
    using Fn = std::remove_reference_t<MakeSource>;
    auto call = [](void* f) -> std::string { return (*static_cast<Fn*>(f))(); };
    return load(hash, key, name, call, const_cast<void*>(static_cast<const void*>(&make_source)));
  }
  KernelCacheStats stats() const;
  // Unloads nothing in use; forgets the loaded kernels so the next request goes to disk.
  void clear_memory_cache();

 private:
  struct Entry {
    std::uint64_t hash;
    std::string key;
    std::string name;
    CUfunction function;
  };
  struct Table {
    explicit Table(std::size_t slots)
        : mask(slots - 1), entries(std::make_unique<std::atomic<const Entry*>[]>(slots)) {}
    std::size_t mask;
    std::size_t used = 0;  // written under the mutex only
    std::unique_ptr<std::atomic<const Entry*>[]> entries;
  };

  static std::uint64_t hash_key(std::string_view key, const char* name) noexcept {
    std::uint64_t h = mix(0x243f6a8885a308d3ull ^ key.size(), key.data(), key.size());
    return mix(h, name, std::strlen(name));
  }
  // Eight bytes per step (the last word overlaps the one before it); a multiply and a shift
  // spread every byte over the word.
  static std::uint64_t mix(std::uint64_t h, const char* p, std::size_t n) noexcept {
    constexpr std::uint64_t kOdd = 0x9e3779b97f4a7c15ull;
    auto step = [&](std::uint64_t word) {
      h = (h ^ word) * kOdd;
      h ^= h >> 31;
    };
    if (n >= 8) {
      for (; n > 8; p += 8, n -= 8) step(word_at<std::uint64_t>(p));
      step(word_at<std::uint64_t>(p + n - 8));
    } else if (n >= 4) {
      step((std::uint64_t(word_at<std::uint32_t>(p)) << 32) | word_at<std::uint32_t>(p + n - 4));
    } else {
      std::uint64_t tail = 0;
      for (std::size_t i = 0; i < n; ++i) tail = (tail << 8) | static_cast<unsigned char>(p[i]);
      step(tail);
    }
    return h ^ (h >> 29);
  }
  template <class T>
  static T word_at(const char* p) noexcept {
    T value;
    std::memcpy(&value, p, sizeof value);
    return value;
  }
  CUfunction find(std::uint64_t hash, std::string_view key, const char* name) const noexcept {
    const Table* table = table_.load(std::memory_order_acquire);
    for (std::size_t i = hash & table->mask;; i = (i + 1) & table->mask) {
      const Entry* e = table->entries[i].load(std::memory_order_acquire);
      if (e == nullptr) return nullptr;
      if (e->hash == hash && e->key == key && e->name == name) {
        memory_hits_.fetch_add(1, std::memory_order_relaxed);
        return e->function;
      }
    }
  }
  CUfunction load(std::uint64_t hash, std::string_view key, const char* name,
                  std::string (*make_source)(void*), void* source_fn);
  void insert_locked(const Entry* entry);
  static void place(Table& table, const Entry* entry);
  CUmodule load_module(const std::string& source, const std::string& key);
  std::vector<char> compile(const std::string& source, const std::string& key);

  Context& context_;
  std::string version_tag_;  // arch + NVRTC + driver versions, part of the disk key
  mutable std::mutex mutex_;
  std::atomic<Table*> table_;
  std::vector<std::unique_ptr<Table>> tables_;   // the current one last; older ones may be read
  std::vector<std::unique_ptr<Entry>> entries_;  // every entry ever published
  std::unordered_map<std::string, CUmodule> modules_by_key_;  // cleared with the memory cache
  std::vector<CUmodule> modules_;  // kept loaded: functions handed out may still be in use
  KernelCacheStats stats_;
  mutable std::atomic<std::int64_t> memory_hits_{0};
};

}  // namespace kiln::cuda
