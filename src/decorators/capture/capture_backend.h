// The bottom layer of every device's chain of backends (runtime/registry.cpp): each op goes to
// the hardware backend, and while a capture of this device is open on the calling thread it is
// also recorded (session.h). Its name is the hardware's: a capture layer is not a decorator the
// user chooses, and outside a capture it costs one relaxed load per op.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>

#include "contract/forwarding.h"
#include "decorators/capture/session.h"

namespace kiln::capturing {

class CaptureBackend final : public ForwardingBackend {
 public:
  explicit CaptureBackend(std::shared_ptr<Backend> hardware)
      : ForwardingBackend(std::move(hardware)), device_(inner().device()) {}

  std::vector<Primitive> run_fused(const FusedProgram& program) override {
    if (Session* session = recording()) [[unlikely]]
      return session->call_fused(inner(), program);
    return inner().run_fused(program);
  }
  void assign(const Primitive& dst, Primitive src) override {
    if (Session* session = recording()) [[unlikely]]
      return session->call_assign(inner(), dst, std::move(src));
    inner().assign(dst, std::move(src));
  }
  // The fusion decorator reserves random values when it records random; inside a region random
  // runs at once instead (Session::random_input draws it afresh before each replay).
  std::optional<RandomStream> reserve_random(std::uint64_t count) override {
    if (recording() != nullptr) [[unlikely]]
      return std::nullopt;
    return inner().reserve_random(count);
  }

  // The replay checker (KILN_CAPTURE_CHECK=1 in the environment when the backend is made): each
  // op outside a capture is captured alone, run, replayed, and its results compared bit for bit
  // with the first run's (ExecutionError naming the op on a difference). Ops that cannot be
  // captured run as they are.
  void set_check(bool check) noexcept { check_.store(check, std::memory_order_relaxed); }
  // Ops the checker has replayed (tests).
  std::uint64_t checks_run() const noexcept { return checks_run_.load(std::memory_order_relaxed); }

#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  result name params override;
#include "kiln/detail/ops.def"
#undef KILN_OP

 private:
  // Per op, out of the forwarding path (capture_recording.cpp, compiled for size): the op
  // recorded into the session open here, else the op under the checker. One function, not two:
  // each call site moves the op's arguments once more. Not exported: only this library calls it.
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  [[gnu::visibility("hidden")]] result intercepted_##name params;
#include "kiln/detail/ops.def"
#undef KILN_OP

  Session* recording() const noexcept {
    Session* session = Session::active();
    return session != nullptr && session->device() == device_ ? session : nullptr;
  }

  // The op, run once alone under a capture of its own and replayed (the checker).
  template <OpCode code, class Result, class... Args>
  [[gnu::visibility("hidden")]] Result checked(Args... args);
  // Captures run alone; the recording, or null when the op cannot be captured here.
  std::shared_ptr<Recording> capture_alone(detail::FunctionRef<void()> run);
  // Replays recording and throws unless results read back as before.
  void check_replay(const Recording& recording, OpCode code, std::span<const Primitive> results);

  const Device device_;
  std::atomic<bool> check_{check_from_environment()};
  std::atomic<std::uint64_t> checks_run_{0};
  static bool check_from_environment() noexcept;
};

}  // namespace kiln::capturing
