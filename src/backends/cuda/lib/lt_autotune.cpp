#include "backends/cuda/lib/lt_autotune.h"

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
