// Autotuning of cuBLASLt products (runtime/autotune.h; on unless KILN_AUTOTUNE=0), shared by the
// float (matmul.cpp) and int8 (int8_matmul.cpp) products: the first call of a plan times the
// heuristic's best few algorithms on its own operands and keeps the fastest if it beats the
// heuristic's first choice, remembered on disk by the plan's key and the machine, so a warm
// process measures nothing. Measuring synchronises the stream, which a CUDA graph capture does
// not allow: a plan first used inside a capture keeps the heuristic's choice in this process.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kiln::cuda::lib {

// Algorithms asked of the heuristic when autotuning.
inline constexpr int kLtAutotuneCandidates = 8;

// The machine part of an autotune key (architecture, SMs, driver, CUDA, cuBLASLt and kiln
// versions): what makes a measured choice valid elsewhere. Cached per device.
std::string lt_machine_key(int device, const char* op);

// The remembered choice of key among candidates, if the cache has one the heuristic offered again
// (anything else is ignored and measured afresh).
std::optional<cublasLtMatmulAlgo_t> remembered_algo(
    const std::string& key, const std::vector<cublasLtMatmulAlgo_t>& candidates);

// Times each candidate with run (one warm-up, then three runs between events on stream) and
// returns the fastest when it beats the first, the heuristic's (autotune::measure), remembering the
// choice under key.
cublasLtMatmulAlgo_t fastest_algo(const std::string& key,
                                  const std::vector<cublasLtMatmulAlgo_t>& candidates,
                                  const std::function<void(const cublasLtMatmulAlgo_t&)>& run,
                                  cudaStream_t stream, const char* op);

// Whether the stream is recording a CUDA graph (no measuring then).
bool stream_capturing(cudaStream_t stream, const char* op);

}  // namespace kiln::cuda::lib
