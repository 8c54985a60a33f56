// The forwarding path every op takes (compiled for speed); recording and checking are in
// capture_recording.cpp.
#include "decorators/capture/capture_backend.h"

#include <cstdlib>
#include <cstring>

namespace kiln::capturing {

bool CaptureBackend::check_from_environment() noexcept {
  const char* value = std::getenv("KILN_CAPTURE_CHECK");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  result CaptureBackend::name params {                                                   \
    if (recording() != nullptr || check_.load(std::memory_order_relaxed)) [[unlikely]]   \
      return intercepted_##name(KILN_MOVE_ARGS(args));                                   \
    return inner().name(KILN_MOVE_ARGS(args));                                           \
  }
#include "kiln/detail/ops.def"
#undef KILN_OP

}  // namespace kiln::capturing
