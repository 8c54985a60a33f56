// Times cuBLASLt's f32 products with the epilogues a fused MLP step could use, on mlp_step's
// shapes (batch 4096, 784-512-512): forward with no epilogue, BIAS, RELU_BIAS and RELU_AUX_BIAS
// (which also writes the relu's bitmask), and the backward product dh = g · wᵀ with no epilogue,
// DRELU (masking by that bitmask) and DRELU_BGRAD (and the bias gradient). Whether the library
// has an algorithm for each, and what it costs against the plain product. A probe for the GPU
// machine; not part of kiln's build.
//   nvcc -O2 -std=c++17 -arch=sm_90 bench/probe/lt_epilogues.cu -lcublasLt -o lt_epilogues
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "lt_probe.h"

cublasLtHandle_t handle;
void* workspace;
constexpr std::size_t kWorkspace = 32u << 20;

// Column-major D (rows × cols) = op(A) · op(B) with the epilogue; times the heuristic's first
// algorithm (median of 50), or says it has none.
void time_product(const char* what, int rows, int cols, int inner, bool a_transposed,
                  const float* a, const float* b, float* d, cublasLtEpilogue_t epilogue,
                  const float* bias, void* aux, float* bias_grad) {
  cublasLtMatmulDesc_t op;
  CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = a_transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                       sizeof epilogue));
  if (bias != nullptr) {
    CHECK(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  }
  if (bias_grad != nullptr) {
    CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_grad,
                                         sizeof bias_grad));
  }
  if (aux != nullptr) {
    const std::int64_t ld = rows;  // a bitmask: rows is a multiple of 128 here
    CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                         sizeof aux));
    CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
  }
  cublasLtMatrixLayout_t la, lb, ld;
  if (a_transposed) {
    CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, inner, rows, inner));
  } else {
    CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, rows, inner, rows));
  }
  CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, inner, cols, inner));
  CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, rows, cols, rows));
  cublasLtMatmulPreference_t pref;
  CHECK(cublasLtMatmulPreferenceCreate(&pref));
  CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &kWorkspace, sizeof kWorkspace));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const auto status =
      cublasLtMatmulAlgoGetHeuristic(handle, op, la, lb, ld, ld, pref, 1, &result, &found);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
    std::printf("%-40s no algorithm (status %d)\n", what, static_cast<int>(status));
  } else {
    const float alpha = 1, beta = 0;
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    std::vector<float> times;
    for (int i = 0; i < 60; ++i) {
      CHECK(cudaEventRecord(start));
      CHECK(cublasLtMatmul(handle, op, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &result.algo,
                           workspace, kWorkspace, nullptr));
      CHECK(cudaEventRecord(stop));
      CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (i >= 10) times.push_back(ms * 1000);
    }
    std::sort(times.begin(), times.end());
    std::printf("%-40s %8.1f us median (%.1f best)\n", what, times[times.size() / 2], times[0]);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(op);
}

int main() {
  CHECK(cublasLtCreate(&handle));
  CHECK(cudaMalloc(&workspace, kWorkspace));
  const int batch = 4096;
  for (int in : {784, 512}) {
    const int out = 512;
    // Row-major h [batch, out] = x [batch, in] · w [in, out] is column-major hᵀ = wᵀ · xᵀ.
    float* x = random_matrix<float>(std::uint64_t(batch) * in, 1);
    float* w = random_matrix<float>(std::uint64_t(in) * out, 2);
    float* bias = random_matrix<float>(out, 3);
    float* h = random_matrix<float>(std::uint64_t(batch) * out, 4);
    void* mask = nullptr;
    CHECK(cudaMalloc(&mask, std::uint64_t(batch) * out / 8));
    char label[64];
    std::snprintf(label, sizeof label, "forward %dx%d·%dx%d", batch, in, in, out);
    std::printf("== %s\n", label);
    time_product("plain", out, batch, in, false, w, x, h, CUBLASLT_EPILOGUE_DEFAULT, nullptr,
                 nullptr, nullptr);
    time_product("BIAS", out, batch, in, false, w, x, h, CUBLASLT_EPILOGUE_BIAS, bias, nullptr,
                 nullptr);
    time_product("RELU_BIAS", out, batch, in, false, w, x, h, CUBLASLT_EPILOGUE_RELU_BIAS, bias,
                 nullptr, nullptr);
    time_product("RELU_AUX_BIAS", out, batch, in, false, w, x, h, CUBLASLT_EPILOGUE_RELU_AUX_BIAS,
                 bias, mask, nullptr);
    if (in == 512) {
      // Row-major dh [batch, in] = g [batch, out] · wᵀ is column-major dhᵀ = w'ᵀᵀ · gᵀ: A is w
      // stored column-major [out, in] (w row-major), transposed.
      float* g = random_matrix<float>(std::uint64_t(batch) * out, 5);
      float* dh = random_matrix<float>(std::uint64_t(batch) * in, 6);
      float* bias_grad = random_matrix<float>(in, 7);
      std::printf("== backward dh = g · wᵀ, %dx%d·%dx%d\n", batch, out, out, in);
      time_product("plain", in, batch, out, true, w, g, dh, CUBLASLT_EPILOGUE_DEFAULT, nullptr,
                   nullptr, nullptr);
      time_product("DRELU", in, batch, out, true, w, g, dh, CUBLASLT_EPILOGUE_DRELU, nullptr, mask,
                   nullptr);
      time_product("DRELU_BGRAD", in, batch, out, true, w, g, dh, CUBLASLT_EPILOGUE_DRELU_BGRAD,
                   nullptr, mask, bias_grad);
    }
  }
  CHECK(cudaDeviceSynchronize());
  return 0;
}
