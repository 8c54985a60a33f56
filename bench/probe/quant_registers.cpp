// Registers, spills and shared memory of the quantized product's kernels for every GGUF kind and
// 1, 2 and 4 rows of x (the matrix-vector kernel), or the rows given as the first argument
// ("8,32,128": the tiled kernel), as ptxas reports them for sm_90: no GPU needed (NVRTC with
// ptxas's -v), so a kernel's occupancy can be read before a device call.
//   g++ -std=c++20 -O1 bench/probe/quant_registers.cpp -Isrc -Iinclude -I/usr/local/cuda/include \
//     -Ibuild/src/backends/cuda/generated build/src/backends/cuda/libkiln_cuda_codegen.a \
//     -Lbuild -lkiln -L/usr/local/cuda/lib64 -lnvrtc -lfmt -Wl,-rpath,$PWD/build \
//     -o /tmp/quant_registers && /tmp/quant_registers
// (KILN_QUANT_MV_PIECES and KILN_QUANT_MV_BLOCKS change the kernels as they do in the plugin.)
#include <nvrtc.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cuda/quant.h"
#include "kiln/quant.h"

int main(int argc, char** argv) {
  std::vector<int> row_counts = {1, 2, 4};
  if (argc > 1) {
    row_counts.clear();
    for (const char* at = argv[1]; *at != '\0';) {
      char* end = nullptr;
      row_counts.push_back(static_cast<int>(std::strtol(at, &end, 10)));
      at = *end == ',' ? end + 1 : end;
      if (end == at && *at != '\0') return 1;
    }
  }
  using kiln::QuantScheme;
  const QuantScheme::Kind kinds[] = {QuantScheme::Kind::Q4_0, QuantScheme::Kind::Q4_1,
                                     QuantScheme::Kind::Q5_0, QuantScheme::Kind::Q5_1,
                                     QuantScheme::Kind::Q8_0, QuantScheme::Kind::Q2_K,
                                     QuantScheme::Kind::Q3_K, QuantScheme::Kind::Q4_K,
                                     QuantScheme::Kind::Q5_K, QuantScheme::Kind::Q6_K};
  for (QuantScheme::Kind kind : kinds) {
    for (int rows : row_counts) {
      auto plan =
          kiln::cuda::plan_quant_product(kiln::quant_scheme(kind), 14336, kiln::DType::BF16, rows);
      plan.out = kiln::DType::BF16;
      const std::string source = kiln::cuda::quant_product_source(plan);
      nvrtcProgram program = nullptr;
      nvrtcCreateProgram(&program, source.c_str(), "kiln_kernel.cu", 0, nullptr, nullptr);
      const char* options[] = {"--gpu-architecture=sm_90", "--std=c++17", "-default-device",
                               "--ptxas-options=-v"};
      const nvrtcResult result = nvrtcCompileProgram(program, 4, options);
      std::size_t size = 0;
      nvrtcGetProgramLogSize(program, &size);
      std::string log(size, '\0');
      nvrtcGetProgramLog(program, log.data());
      std::printf("== %s (shared %zu bytes)%s\n", plan.key().c_str(), plan.shared_bytes(),
                  result == NVRTC_SUCCESS ? "" : " FAILED");
      for (std::size_t at = 0; at < log.size();) {
        const std::size_t end = log.find('\n', at);
        const std::string line = log.substr(at, end - at);
        if (line.find("registers") != std::string::npos ||
            line.find("spill") != std::string::npos || result != NVRTC_SUCCESS)
          std::printf("   %s\n", line.c_str());
        if (end == std::string::npos) break;
        at = end + 1;
      }
      nvrtcDestroyProgram(&program);
    }
  }
}
