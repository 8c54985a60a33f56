// What CaptureBackend does off the forwarding path: an op recorded into the session open on
// this thread, and the replay checker. Compiled for size (CMakeLists.txt): it runs once per op at
// capture, never per replay.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "decorators/capture/capture_backend.h"
#include "kiln/detail/format.h"
#include "kiln/detail/op_columns.h"

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

template <OpCode code, class Result, class... Args>
Result CaptureBackend::checked(Args... args) {
  if constexpr (std::is_same_v<Result, Primitive> || std::is_same_v<Result, PrimitivePair>) {
    Result result{};
    // Called through this backend inside the capture, the op records itself. args stay held
    // here: a failed capture runs the op again from them.
    std::shared_ptr<Recording> recording =
        capture_alone([&] { result = (this->*ir::OpTraits<code>::kMethod)(Args(args)...); });
    if (recording != nullptr) {
      if constexpr (std::is_same_v<Result, Primitive>) {
        check_replay(*recording, code, {&result, 1});
      } else {
        const Primitive pair[] = {result.first, result.second};
        check_replay(*recording, code, pair);
      }
      return result;
    }
  }
  return (inner().*ir::OpTraits<code>::kMethod)(std::move(args)...);
}

// Ops a capture refuses (impl R or V: values to the host or another device, a shape from the
// values) are refused inside a region, and the checker runs them as they are: no recording path.
#define KILN_CAPTURE_OR(a, b) KILN_CAPTURE_OR_EXPANDED(a, b)
#define KILN_CAPTURE_OR_EXPANDED(a, b) KILN_CAPTURE_OR_##a##b
#define KILN_CAPTURE_OR_00 0
#define KILN_CAPTURE_OR_01 1
#define KILN_CAPTURE_OR_10 1
#define KILN_CAPTURE_OR_11 1
#define KILN_CAPTURE_REFUSES(impl) \
  KILN_CAPTURE_OR(KILN_IMPL_HOST(impl), KILN_IMPL_VALUE_SHAPE(impl))
#define KILN_CAPTURE_INTERCEPT_0(name, result, params, args)             \
  result CaptureBackend::intercepted_##name params {                     \
    if (Session* session = recording()) [[likely]]                       \
      return session->call<OpCode::name>(inner(), KILN_MOVE_ARGS(args)); \
    return checked<OpCode::name, result>(KILN_MOVE_ARGS(args));          \
  }
#define KILN_CAPTURE_INTERCEPT_1(name, result, params, args)                   \
  result CaptureBackend::intercepted_##name params {                           \
    if (recording() != nullptr) Session::refuse_if_uncapturable(OpCode::name); \
    return inner().name(KILN_MOVE_ARGS(args));                                 \
  }
#define KILN_CAPTURE_INTERCEPT(refused) KILN_CAPTURE_INTERCEPT_EXPANDED(refused)
#define KILN_CAPTURE_INTERCEPT_EXPANDED(refused) KILN_CAPTURE_INTERCEPT_##refused
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  KILN_CAPTURE_INTERCEPT(KILN_CAPTURE_REFUSES(impl))(name, result, params, args)
#include "kiln/detail/ops.def"
#undef KILN_OP

std::shared_ptr<Recording> CaptureBackend::capture_alone(detail::FunctionRef<void()> run) {
  try {
    return record_region(inner(), device_, run);
  } catch (const InvalidArgument& e) {
    // What the device cannot capture runs as it is; other errors are the op's own.
    if (std::strstr(e.what(), "cannot be captured") != nullptr) return nullptr;
    throw;
  }
}

void CaptureBackend::check_replay(const Recording& recording, OpCode code,
                                  std::span<const Primitive> results) {
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
          op_info(code).name, "a replay of its capture on ", device_.to_string(),
          " differs from its first run in ", "result ", i, " (", dtype_name(results[i]->dtype()),
          " ", results[i]->shape().to_string(), ") from byte ", at, " of ", a.size());
    }
  }
}

}  // namespace kiln::capturing
