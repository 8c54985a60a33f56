// Checks every call into CUDA (runtime, driver, cuBLASLt, NVRTC) and turns a failure into a kiln
// exception naming the op, the call and CUDA's own reason. Out-of-memory codes become
// OutOfMemory so callers can release cached blocks and retry; everything else ExecutionError.
#pragma once

#include <cublasLt.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::cuda {

[[noreturn]] inline void fail_cuda(const char* op, const char* call, const char* reason,
                                   bool out_of_memory) {
  if (out_of_memory) detail::fail<OutOfMemory>(op, call, " failed: ", reason);
  detail::fail<ExecutionError>(op, call, " failed: ", reason);
}

inline void check(cudaError_t status, const char* op, const char* call) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear the sticky-free error state so the device keeps working
  fail_cuda(op, call, cudaGetErrorString(status), status == cudaErrorMemoryAllocation);
}

inline void check(CUresult status, const char* op, const char* call) {
  if (status == CUDA_SUCCESS) return;
  const char* reason = nullptr;
  if (cuGetErrorString(status, &reason) != CUDA_SUCCESS || reason == nullptr) reason = "unknown";
  fail_cuda(op, call, reason, status == CUDA_ERROR_OUT_OF_MEMORY);
}

inline void check(cublasStatus_t status, const char* op, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail_cuda(op, call, cublasLtGetStatusString(status), status == CUBLAS_STATUS_ALLOC_FAILED);
}

inline void check(nvrtcResult status, const char* op, const char* call) {
  if (status == NVRTC_SUCCESS) return;
  fail_cuda(op, call, nvrtcGetErrorString(status), status == NVRTC_ERROR_OUT_OF_MEMORY);
}

}  // namespace kiln::cuda

// KILN_CUDA_CHECK(op, call): evaluates call once and throws if it failed, quoting the call.
#define KILN_CUDA_CHECK(op, call) ::kiln::cuda::check((call), (op), #call)
