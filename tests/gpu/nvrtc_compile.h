// Generated kernel sources compiled with NVRTC as the plugin compiles them on an H100 or H200
// (sm_90a: Context::compile_arch), on any machine with the toolkit (no GPU or driver needed).
//
// CI checks the sources through NVRTC's front end and optimizer to PTX (compute_90a): ptxas is
// more than half of a large kernel's compile (the attention kernel 18 s to a cubin, 7 s to PTX
// on two cores) and what it rejects the front end has already accepted only in kernels that do
// not fit the machine, which the GPU machine's runs find. KILN_CODEGEN=all (scripts/gpu-check)
// compiles every source down to the cubin, and every instance a test would otherwise sample.
#pragma once

#include <nvrtc.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace kiln::test {

// KILN_CODEGEN=all: every instance, each to a cubin.
inline bool every_codegen_instance() {
  const char* which = std::getenv("KILN_CODEGEN");
  return which != nullptr && std::string(which) == "all";
}

struct NvrtcCompiled {
  bool ok = false;
  std::string log;         // NVRTC's messages (warnings too, when it compiled)
  std::size_t bytes = 0;   // of the cubin, or of the PTX where CI stops there
  double cpu_seconds = 0;  // of the compiling thread (NVRTC compiles on the caller's thread)
};

inline double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

inline NvrtcCompiled nvrtc_compile(const std::string& source) {
  NvrtcCompiled c;
  const double start = thread_cpu_seconds();
  nvrtcProgram program = nullptr;
  if (nvrtcCreateProgram(&program, source.c_str(), "kiln_kernel.cu", 0, nullptr, nullptr) !=
      NVRTC_SUCCESS) {
    c.log = "nvrtcCreateProgram failed";
    return c;
  }
  const bool cubin = every_codegen_instance();
  const char* options[] = {cubin ? "--gpu-architecture=sm_90a" : "--gpu-architecture=compute_90a",
                           "--std=c++17", "-default-device"};
  const nvrtcResult result = nvrtcCompileProgram(program, 3, options);
  std::size_t size = 0;
  nvrtcGetProgramLogSize(program, &size);
  c.log.assign(size, '\0');
  nvrtcGetProgramLog(program, c.log.data());
  c.log.erase(std::find(c.log.begin(), c.log.end(), '\0'), c.log.end());
  c.ok = result == NVRTC_SUCCESS && (cubin ? nvrtcGetCUBINSize(program, &c.bytes)
                                           : nvrtcGetPTXSize(program, &c.bytes)) == NVRTC_SUCCESS;
  if (result != NVRTC_SUCCESS) c.log = std::string(nvrtcGetErrorString(result)) + "\n" + c.log;
  nvrtcDestroyProgram(&program);
  c.cpu_seconds = thread_cpu_seconds() - start;
  return c;
}

// NVRTC's errors compiling source; empty when it compiles.
inline std::string nvrtc_errors(const std::string& source) {
  NvrtcCompiled c = nvrtc_compile(source);
  return c.ok ? std::string() : c.log;
}

}  // namespace kiln::test
