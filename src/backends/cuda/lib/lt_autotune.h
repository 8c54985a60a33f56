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

// The heuristic's results and, when autotuning, variants of its first kLtSplitVariantsOf that
// split the sum over k differently (CUBLASLT_ALGO_CONFIG_SPLITK_NUM 2 to 16, the parts added by
// cuBLASLt's reduction kernel in a fixed order, so deterministic), each checked
// (cublasLtMatmulAlgoCheck) and needing at most workspace_bytes: the heuristic ranks few such
// splits, and a product with few output tiles over a long k (a first layer's product at a small
// batch: 64 tiles walking k = 784 serially on 132 SMs) runs faster split. The autotuner times
// them beside the rest.
inline constexpr int kLtSplitVariantsOf = 3;
std::vector<cublasLtMatmulHeuristicResult_t> with_split_variants(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
    const cublasLtMatmulHeuristicResult_t* results, int found, std::size_t workspace_bytes);

// The machine part of an autotune key (architecture, SMs, driver, CUDA, cuBLASLt and kiln
// versions): what makes a measured choice valid elsewhere. Cached per device.
std::string lt_machine_key(int device, const char* op);

// A plan's algorithm among the heuristic's candidates: remembered on disk, else measured on the
// plan's first call outside a capture (the heuristic's own choice stays for a plan first met
// inside one: its replays and its eager runs then give the same bits).
struct LtChoice {
  std::string key;  // the autotune key (shape, dtypes, machine); set before offer
  cublasLtMatmulAlgo_t algo{};
  std::vector<cublasLtMatmulAlgo_t> candidates;  // the heuristic's best few, until settled

  // The heuristic's results, best first: the first is the algorithm until the choice is made;
  // a choice the cache remembers among them is taken now.
  void offer(const cublasLtMatmulHeuristicResult_t* results, int found);
  // The algorithm to run: on the first call, the fastest candidate as run times it on stream.
  const cublasLtMatmulAlgo_t& settle(const std::function<void(const cublasLtMatmulAlgo_t&)>& run,
                                     cudaStream_t stream, const char* op);
};

}  // namespace kiln::cuda::lib
