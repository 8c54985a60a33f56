#include "backends/cuda/compiler.h"

#include <nvrtc.h>

#include <chrono>

#include "backends/cuda/check.h"
#include "backends/cuda/context.h"
#include "backends/cuda/disk_cache.h"

namespace kiln::cuda {

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

Compiler::Compiler(Context& context) : context_(context) {
  int major = 0, minor = 0, driver = 0;
  KILN_CUDA_CHECK("cuda", nvrtcVersion(&major, &minor));
  KILN_CUDA_CHECK("cuda", cuDriverGetVersion(&driver));
  version_tag_ = context_.arch() + "/nvrtc" + std::to_string(major) + "." +
                 std::to_string(minor) + "/driver" + std::to_string(driver);
}

Compiler::~Compiler() {
  cuCtxSetCurrent(context_.context());
  for (CUmodule module : modules_) cuModuleUnload(module);
}

CUfunction Compiler::function(const std::string& key, const char* name,
                              const std::function<std::string()>& make_source) {
  std::lock_guard lock(mutex_);
  // Per-thread buffer: a cache hit allocates nothing.
  thread_local std::string full_key;
  full_key.assign(key).append("#").append(name);
  if (auto it = functions_.find(full_key); it != functions_.end()) {
    ++stats_.memory_hits;
    return it->second;
  }
  CUmodule module = load_module(make_source(), key);
  CUfunction function = nullptr;
  KILN_CUDA_CHECK(key.c_str(), cuModuleGetFunction(&function, module, name));
  functions_.emplace(full_key, function);
  return function;
}

CUmodule Compiler::load_module(const std::string& source, const std::string& key) {
  context_.make_current();
  const std::string disk_key = content_hash(source + "\n//" + version_tag_);
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
  const std::string arch = "--gpu-architecture=" + context_.arch();
  const char* options[] = {arch.c_str(), "--std=c++17", "-default-device"};
  const nvrtcResult result = nvrtcCompileProgram(program, 3, options);
  if (result != NVRTC_SUCCESS) {
    std::size_t log_size = 0;
    nvrtcGetProgramLogSize(program, &log_size);
    std::string log(log_size, '\0');
    if (log_size > 0) nvrtcGetProgramLog(program, log.data());
    detail::fail<ExecutionError>(key, "NVRTC could not compile a generated kernel for ",
                                 context_.arch(), ": ", nvrtcGetErrorString(result), "\n", log,
                                 "\n--- source ---\n", source);
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
  return stats_;
}

void Compiler::clear_memory_cache() {
  std::lock_guard lock(mutex_);
  functions_.clear();
}

}  // namespace kiln::cuda
