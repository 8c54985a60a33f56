#include "backends/cuda/lib/lt_autotune.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "backends/cuda/check.h"
#include "backends/cuda/lib/event_timer.h"
#include "kiln/version.h"
#include "runtime/autotune.h"

namespace kiln::cuda::lib {

std::string lt_machine_key(int device, const char* op) {
  static std::mutex mutex;
  static std::unordered_map<int, std::string> machines;
  std::lock_guard lock(mutex);
  std::string& machine = machines[device];
  if (!machine.empty()) return machine;
  int major = 0, minor = 0, sms = 0, driver = 0, runtime = 0;
  KILN_CUDA_CHECK(op, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  KILN_CUDA_CHECK(op, cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  KILN_CUDA_CHECK(op, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  KILN_CUDA_CHECK(op, cudaDriverGetVersion(&driver));
  KILN_CUDA_CHECK(op, cudaRuntimeGetVersion(&runtime));
  machine = detail::concat("sm_", major, minor, "/", sms, "sm/driver ", driver, "/cuda ", runtime,
                           "/cublasLt ", cublasLtGetVersion(), "/kiln ", kVersion);
  return machine;
}

namespace {

std::optional<cublasLtMatmulAlgo_t> remembered_algo(
    const std::string& key, const std::vector<cublasLtMatmulAlgo_t>& candidates) {
  const std::optional<autotune::Choice> known = autotune::find(key);
  if (!known) return std::nullopt;
  cublasLtMatmulAlgo_t algo{};
  if (!autotune::from_hex(known->choice, &algo, sizeof(algo))) return std::nullopt;
  for (const auto& candidate : candidates) {
    if (std::memcmp(&candidate, &algo, sizeof(algo)) == 0) return algo;
  }
  return std::nullopt;
}

cublasLtMatmulAlgo_t fastest_algo(const std::string& key,
                                  const std::vector<cublasLtMatmulAlgo_t>& candidates,
                                  const std::function<void(const cublasLtMatmulAlgo_t&)>& run,
                                  cudaStream_t stream, const char* op) {
  EventTimer timer(op);
  auto seconds = [&](int i) {
    const cublasLtMatmulAlgo_t& algo = candidates[static_cast<std::size_t>(i)];
    return timer.seconds([&] { run(algo); }, [&] { return stream; });
  };
  auto encode = [&](int i) {
    return autotune::to_hex(&candidates[static_cast<std::size_t>(i)], sizeof(cublasLtMatmulAlgo_t));
  };
  cublasLtMatmulAlgo_t best = candidates.front();
  const std::string choice =
      autotune::measure(key, static_cast<int>(candidates.size()), seconds, encode);
  autotune::from_hex(choice, &best, sizeof(best));
  return best;
}

bool stream_capturing(cudaStream_t stream, const char* op) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  KILN_CUDA_CHECK(op, cudaStreamIsCapturing(stream, &capturing));
  return capturing != cudaStreamCaptureStatusNone;
}

}  // namespace

std::vector<cublasLtMatmulHeuristicResult_t> with_split_variants(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
    const cublasLtMatmulHeuristicResult_t* results, int found, std::size_t workspace_bytes) {
  std::vector<cublasLtMatmulHeuristicResult_t> out(results, results + found);
  if (!autotune::enabled()) return out;
  auto known = [&](const cublasLtMatmulAlgo_t& algo) {
    return std::any_of(out.begin(), out.end(), [&](const cublasLtMatmulHeuristicResult_t& r) {
      return std::memcmp(&r.algo, &algo, sizeof(algo)) == 0;
    });
  };
  // Attribute queries on an algorithm the heuristic returned fail only for attributes this
  // cuBLASLt lacks: a variant is then simply not offered.
  for (int i = 0; i < std::min(found, kLtSplitVariantsOf); ++i) {
    const cublasLtMatmulAlgo_t& base = results[i].algo;
    std::int32_t splittable = 0;
    std::uint32_t schemes = 0;
    std::size_t written = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &splittable,
                                          sizeof(splittable), &written) != CUBLAS_STATUS_SUCCESS ||
        splittable == 0 ||
        cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &schemes,
                                          sizeof(schemes), &written) != CUBLAS_STATUS_SUCCESS) {
      continue;
    }
    // Partial sums in the compute type, added by a separate kernel; else in the output's type.
    const std::uint32_t scheme = (schemes & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) != 0
                                     ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
                                 : (schemes & CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE) != 0
                                     ? CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE
                                     : 0;
    if (scheme == 0) continue;
    for (const std::uint32_t splits : {2u, 4u, 8u, 16u}) {
      cublasLtMatmulAlgo_t algo = base;
      cublasLtMatmulHeuristicResult_t variant{};
      if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                               sizeof(splits)) != CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                               &scheme, sizeof(scheme)) != CUBLAS_STATUS_SUCCESS ||
          known(algo) ||
          cublasLtMatmulAlgoCheck(handle, desc, a, b, c, d, &algo, &variant) !=
              CUBLAS_STATUS_SUCCESS ||
          variant.workspaceSize > workspace_bytes) {
        continue;
      }
      variant.algo = algo;
      out.push_back(variant);
    }
  }
  return out;
}

void LtChoice::offer(const cublasLtMatmulHeuristicResult_t* results, int found) {
  algo = results[0].algo;
  candidates.clear();
  if (found < 2) return;
  for (int i = 0; i < found; ++i) candidates.push_back(results[i].algo);
  if (const std::optional<cublasLtMatmulAlgo_t> known = remembered_algo(key, candidates)) {
    algo = *known;
    candidates.clear();
  }
}

const cublasLtMatmulAlgo_t& LtChoice::settle(
    const std::function<void(const cublasLtMatmulAlgo_t&)>& run, cudaStream_t stream,
    const char* op) {
  if (!candidates.empty()) {
    if (!stream_capturing(stream, op)) algo = fastest_algo(key, candidates, run, stream, op);
    candidates.clear();
  }
  return algo;
}

}  // namespace kiln::cuda::lib
