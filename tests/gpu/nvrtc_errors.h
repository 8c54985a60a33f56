// NVRTC's errors compiling a kernel source for sm_90 as the plugin does (tests of generated
// sources that need no GPU); empty when it compiles.
#pragma once

#include <nvrtc.h>

#include <string>

namespace kiln::test {

inline std::string nvrtc_errors(const std::string& source) {
  nvrtcProgram program = nullptr;
  if (nvrtcCreateProgram(&program, source.c_str(), "kiln_kernel.cu", 0, nullptr, nullptr) !=
      NVRTC_SUCCESS) {
    return "nvrtcCreateProgram failed";
  }
  const char* options[] = {"--gpu-architecture=sm_90", "--std=c++17", "-default-device"};
  const nvrtcResult result = nvrtcCompileProgram(program, 3, options);
  std::string log;
  if (result != NVRTC_SUCCESS) {
    std::size_t size = 0;
    nvrtcGetProgramLogSize(program, &size);
    log.assign(size, '\0');
    nvrtcGetProgramLog(program, log.data());
    log = std::string(nvrtcGetErrorString(result)) + "\n" + log;
  }
  nvrtcDestroyProgram(&program);
  return log;
}

}  // namespace kiln::test
