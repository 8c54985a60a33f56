#include "backends/cuda/compiler.h"

#include <nvrtc.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>

#include "backends/cuda/check.h"
#include "backends/cuda/context.h"
#include "backends/cuda/disk_cache.h"

namespace kiln::cuda {

namespace {
constexpr std::size_t kInitialSlots = 256;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// KILN_CUDA_SOURCES=DIR: each kernel's generated source is written to DIR/NAME-HASH.cu when its
// module is loaded (from the disk cache or compiled), for reading or for ptxas. Best effort.
void keep_source(const std::string& source, const std::string& key, const std::string& hash) {
  static const char* const dir = std::getenv("KILN_CUDA_SOURCES");
  if (dir == nullptr || *dir == '\0') return;
  std::string name;
  for (char c : key) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') break;
    name += c;
  }
  if (name.empty() || name.size() > 64) name = "kernel";
  std::ofstream(std::string(dir) + "/" + name + "-" + hash + ".cu") << source;
}
}  // namespace

Compiler::Compiler(Context& context) : context_(context) {
  int major = 0, minor = 0, driver = 0;
  KILN_CUDA_CHECK("cuda", nvrtcVersion(&major, &minor));
  KILN_CUDA_CHECK("cuda", cuDriverGetVersion(&driver));
  version_tag_ = context_.compile_arch() + "/nvrtc" + std::to_string(major) + "." +
                 std::to_string(minor) + "/driver" + std::to_string(driver);
  tables_.push_back(std::make_unique<Table>(kInitialSlots));
  table_.store(tables_.back().get(), std::memory_order_release);
}

Compiler::~Compiler() {
  cuCtxSetCurrent(context_.context());
  for (CUmodule module : modules_) cuModuleUnload(module);
}

CUfunction Compiler::load(std::uint64_t hash, std::string_view key, const char* name,
                          std::string (*make_source)(void*), void* source_fn) {
  std::lock_guard lock(mutex_);
  // Another thread may have loaded it since this one's lock-free look.
  if (CUfunction found = find(hash, key, name)) return found;
  const std::string key_text(key);
  CUmodule module = nullptr;
  if (auto it = modules_by_key_.find(key_text); it != modules_by_key_.end()) {
    module = it->second;  // another function of a module already loaded
  } else {
    module = load_module(make_source(source_fn), key_text);
    modules_by_key_.emplace(key_text, module);
  }
  CUfunction function = nullptr;
  KILN_CUDA_CHECK(key_text.c_str(), cuModuleGetFunction(&function, module, name));
  entries_.push_back(std::make_unique<Entry>(Entry{hash, key_text, name, function}));
  insert_locked(entries_.back().get());
  return function;
}

void Compiler::insert_locked(const Entry* entry) {
  Table* table = table_.load(std::memory_order_relaxed);
  if (2 * (table->used + 1) > table->mask + 1) {
    // At most half full keeps probes short. Readers of the old table still find what it held.
    auto grown = std::make_unique<Table>(2 * (table->mask + 1));
    for (std::size_t i = 0; i <= table->mask; ++i) {
      if (const Entry* e = table->entries[i].load(std::memory_order_relaxed)) place(*grown, e);
    }
    table = grown.get();
    tables_.push_back(std::move(grown));
  }
  place(*table, entry);
  table_.store(table, std::memory_order_release);
}

void Compiler::place(Table& table, const Entry* entry) {
  std::size_t i = entry->hash & table.mask;
  while (table.entries[i].load(std::memory_order_relaxed) != nullptr) i = (i + 1) & table.mask;
  table.entries[i].store(entry, std::memory_order_release);
  ++table.used;
}

CUmodule Compiler::load_module(const std::string& source, const std::string& key) {
  context_.make_current();
  const std::string disk_key = content_hash(source + "\n//" + version_tag_);
  keep_source(source, key, disk_key);
  const auto start = std::chrono::steady_clock::now();
  CUmodule module = nullptr;
  if (auto image = DiskCache::load(disk_key)) {
    if (cuModuleLoadData(&module, image->data()) == CUDA_SUCCESS) {
      ++stats_.disk_hits;
      stats_.disk_load_seconds += seconds_since(start);
      modules_.push_back(module);
      return module;
    }
    module = nullptr;  // a corrupt or foreign entry: compile again and overwrite it
  }
  const std::vector<char> image = compile(source, key);
  KILN_CUDA_CHECK(key.c_str(), cuModuleLoadData(&module, image.data()));
  DiskCache::store(disk_key, image);
  modules_.push_back(module);
  return module;
}

std::vector<char> Compiler::compile(const std::string& source, const std::string& key) {
  const auto start = std::chrono::steady_clock::now();
  nvrtcProgram program = nullptr;
  KILN_CUDA_CHECK(key.c_str(), nvrtcCreateProgram(&program, source.c_str(), "kiln_kernel.cu", 0,
                                                  nullptr, nullptr));
  // Releases the program on every path out of this function.
  struct Guard {
    nvrtcProgram& p;
    ~Guard() { nvrtcDestroyProgram(&p); }
  } guard{program};
  const std::string arch = "--gpu-architecture=" + context_.compile_arch();
  const char* options[] = {arch.c_str(), "--std=c++17", "-default-device"};
  const nvrtcResult result = nvrtcCompileProgram(program, 3, options);
  if (result != NVRTC_SUCCESS) {
    std::size_t log_size = 0;
    nvrtcGetProgramLogSize(program, &log_size);
    std::string log(log_size, '\0');
    if (log_size > 0) nvrtcGetProgramLog(program, log.data());
    detail::fail<ExecutionError>(key, "NVRTC could not compile a generated kernel for ",
                                 context_.compile_arch(), ": ", nvrtcGetErrorString(result), "\n",
                                 log, "\n--- source ---\n", source);
  }
  std::size_t size = 0;
  KILN_CUDA_CHECK(key.c_str(), nvrtcGetCUBINSize(program, &size));
  std::vector<char> image(size);
  KILN_CUDA_CHECK(key.c_str(), nvrtcGetCUBIN(program, image.data()));
  ++stats_.compiles;
  stats_.compile_seconds += seconds_since(start);
  return image;
}

KernelCacheStats Compiler::stats() const {
  std::lock_guard lock(mutex_);
  KernelCacheStats stats = stats_;
  stats.memory_hits = memory_hits_.load(std::memory_order_relaxed);
  return stats;
}

void Compiler::clear_memory_cache() {
  std::lock_guard lock(mutex_);
  tables_.push_back(std::make_unique<Table>(kInitialSlots));
  table_.store(tables_.back().get(), std::memory_order_release);
  modules_by_key_.clear();
}

}  // namespace kiln::cuda
