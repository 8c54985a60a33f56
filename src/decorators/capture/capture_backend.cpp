#include "decorators/capture/capture_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kiln/detail/format.h"

namespace kiln::capturing {

namespace {

// Equal but for reordered sums: each element within 1e-5 (1e-2 for f16/bf16) of the largest
// magnitude in the result (a sum's rounding scales with its terms, not with the sum), NaN where
// NaN.
bool close(const TensorData& a, const TensorData& b) {
  const std::vector<double> x = a.to_f64_vec();
  const std::vector<double> y = b.to_f64_vec();
  double scale = 0;
  for (double v : x) {
    if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
  }
  const double tolerance = (dtype_size(a.dtype()) == 2 ? 1e-2 : 1e-5) * scale;
  for (std::size_t k = 0; k < x.size(); ++k) {
    if (std::isnan(x[k]) || std::isnan(y[k])) {
      if (std::isnan(x[k]) != std::isnan(y[k])) return false;
      continue;
    }
    if (x[k] != y[k] && !(std::abs(x[k] - y[k]) <= tolerance)) return false;
  }
  return true;
}

}  // namespace

bool CaptureBackend::check_from_environment() noexcept {
  const char* value = std::getenv("KILN_CAPTURE_CHECK");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

std::shared_ptr<Recording> CaptureBackend::capture_alone(const std::function<void(Session&)>& run) {
  try {
    return record_region(inner(), device_, [&] { run(*Session::active()); });
  } catch (const InvalidArgument& e) {
    // What the device cannot capture runs as it is; other errors are the op's own.
    if (std::strstr(e.what(), "cannot be captured") != nullptr) return nullptr;
    throw;
  }
}

void CaptureBackend::check_replay(const Recording& recording, std::string_view op,
                                  const std::vector<Primitive>& results) {
  checks_run_.fetch_add(1, std::memory_order_relaxed);
  std::vector<TensorData> first;
  for (const Primitive& p : results) first.push_back(inner().into_data(p).get());
  if (recording.device_graph) {
    recording.device_graph->launch();
  } else {
    recording.replay(inner());
  }
  for (std::size_t i = 0; i < results.size(); ++i) {
    const TensorData again = inner().into_data(results[i]).get();
    const auto a = first[i].bytes();
    const auto b = again.bytes();
    if (a.size() != b.size() || (!a.empty() && std::memcmp(a.data(), b.data(), a.size()) != 0)) {
      // Floats summed by atomics (scatter-add gradients on cuda) come in any order: a replay
      // may round differently, never by more than a few units in the last place.
      if (a.size() == b.size() && is_float(results[i]->dtype()) && close(first[i], again)) continue;
      std::size_t at = 0;
      while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
      kiln::detail::fail<ExecutionError>(
          op, "a replay of its capture on ", device_.to_string(), " differs from its first run in ",
          "result ", i, " (", dtype_name(results[i]->dtype()), " ", results[i]->shape().to_string(),
          ") from byte ", at, " of ", a.size());
    }
  }
}

}  // namespace kiln::capturing
