// Lists cuBLASLt's heuristic candidates for one square row-major matmul (as kiln maps it: the
// operands swapped, column-major, no transposes) and times each on the GPU: which algorithm
// the default (first) choice is, and whether a runner-up is faster. A tuning probe, run by
// bench/probe/matmul.sh on the GPU machine; not part of kiln's build.
//   lt_algos KIND N [CANDIDATES]   KIND: 0 bf16, 1 f16, 2 f32, 3 tf32
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "lt_probe.h"

// One configuration attribute; they are 16- or 32-bit, so the size is asked first.
int attribute(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t which) {
  std::size_t size = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, which, nullptr, 0, &size) != 0 || size == 0 ||
      size > sizeof(std::uint64_t)) {
    return -1;
  }
  std::uint64_t value = 0;  // little-endian: the low bytes hold the attribute
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, which, &value, size, &size) != 0) return -1;
  return static_cast<int>(value);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: lt_algos KIND N [CANDIDATES]\n");
    return 2;
  }
  const int kind = std::atoi(argv[1]);
  const std::uint64_t n = std::strtoull(argv[2], nullptr, 10);
  const int wanted = argc > 3 ? std::atoi(argv[3]) : 32;
  const cudaDataType_t type = kind == 0 ? CUDA_R_16BF : kind == 1 ? CUDA_R_16F : CUDA_R_32F;
  const cublasComputeType_t compute = kind == 3 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  if (kind == 0) {
    a = random_matrix<__nv_bfloat16>(n * n, 1);
    b = random_matrix<__nv_bfloat16>(n * n, 2);
    c = random_matrix<__nv_bfloat16>(n * n, 3);
  } else if (kind == 1) {
    a = random_matrix<__half>(n * n, 1);
    b = random_matrix<__half>(n * n, 2);
    c = random_matrix<__half>(n * n, 3);
  } else {
    a = random_matrix<float>(n * n, 1);
    b = random_matrix<float>(n * n, 2);
    c = random_matrix<float>(n * n, 3);
  }
  const std::size_t workspace_bytes = std::size_t{32} << 20;
  void* workspace = nullptr;
  CHECK(cudaMalloc(&workspace, workspace_bytes));
  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  cublasLtHandle_t handle = nullptr;
  CHECK(cublasLtCreate(&handle));
  cublasLtMatmulDesc_t op = nullptr;
  CHECK(cublasLtMatmulDescCreate(&op, compute, CUDA_R_32F));
  cublasLtMatrixLayout_t layout = nullptr;
  CHECK(cublasLtMatrixLayoutCreate(&layout, type, n, n, n));
  cublasLtMatmulPreference_t preference = nullptr;
  CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const std::uint64_t max_workspace = workspace_bytes;
  CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &max_workspace, sizeof(max_workspace)));
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<std::size_t>(wanted));
  int found = 0;
  CHECK(cublasLtMatmulAlgoGetHeuristic(handle, op, layout, layout, layout, layout, preference,
                                       wanted, results.data(), &found));
  std::printf("lt_algos kind %d n %llu: %d heuristic candidates (cuBLASLt %zu)\n", kind,
              static_cast<unsigned long long>(n), found, cublasLtGetVersion());
  const float one = 1.0f, zero = 0.0f;
  cudaEvent_t start = nullptr, stop = nullptr;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  const double flops = 2.0 * static_cast<double>(n) * n * n;
  for (int i = 0; i < found; ++i) {
    const cublasLtMatmulAlgo_t& algo = results[static_cast<std::size_t>(i)].algo;
    auto run = [&] {
      return cublasLtMatmul(handle, op, &one, b, layout, a, layout, &zero, c, layout, c, layout,
                            &algo, workspace, workspace_bytes, stream);
    };
    if (run() != CUBLAS_STATUS_SUCCESS) {
      std::printf("  #%2d refused\n", i);
      continue;
    }
    for (int w = 0; w < 4; ++w) CHECK(run());
    std::vector<float> times;
    for (int r = 0; r < 15; ++r) {
      CHECK(cudaEventRecord(start, stream));
      CHECK(run());
      CHECK(cudaEventRecord(stop, stream));
      CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, start, stop));
      times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    const float median = times[times.size() / 2];
    std::printf(
        "  #%2d id %3d tile %3d stages %3d splitk %2d reduction %d swizzle %d custom %3d "
        "cluster %2d inner %d waves %.2f: %.3f ms (%.0f TFLOP/s)\n",
        i, attribute(algo, CUBLASLT_ALGO_CONFIG_ID), attribute(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
        attribute(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
        attribute(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
        attribute(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
        attribute(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
        attribute(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
        attribute(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
        attribute(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID),
        static_cast<double>(results[static_cast<std::size_t>(i)].wavesCount), median,
        flops / (median * 1e-3) / 1e12);
  }
  return 0;
}
