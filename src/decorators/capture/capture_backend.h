// The bottom layer of every device's chain of backends (runtime/registry.cpp): each op goes to
// the hardware backend, and while a capture of this device is open on the calling thread it is
// also recorded (session.h). Its name is the hardware's: a capture layer is not a decorator the
// user chooses, and outside a capture it costs one relaxed load per op.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <type_traits>
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

#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form) \
  result name params override {                                                     \
    if (Session* session = recording()) [[unlikely]]                                \
      return session->call<OpCode::name>(inner(), KILN_MOVE_ARGS(args));            \
    if (check_.load(std::memory_order_relaxed)) [[unlikely]]                        \
      return checked<OpCode::name, result>(KILN_MOVE_ARGS(args));                   \
    return inner().name(KILN_MOVE_ARGS(args));                                      \
  }
#include "kiln/detail/ops.def"
#undef KILN_OP

 private:
  Session* recording() const noexcept {
    Session* session = Session::active();
    return session != nullptr && session->device() == device_ ? session : nullptr;
  }

  template <OpCode code, class Result, class... Args>
  Result checked(Args... args);
  // Captures run(session) alone; the recording, or null when the op cannot be captured here.
  std::shared_ptr<Recording> capture_alone(const std::function<void(Session&)>& run);
  // Replays recording and throws unless results read back as before.
  void check_replay(const Recording& recording, std::string_view op,
                    const std::vector<Primitive>& results);

  const Device device_;
  std::atomic<bool> check_{check_from_environment()};
  std::atomic<std::uint64_t> checks_run_{0};
  static bool check_from_environment() noexcept;
};

template <OpCode code, class Result, class... Args>
Result CaptureBackend::checked(Args... args) {
  constexpr bool kTensorResult =
      std::is_same_v<Result, Primitive> || std::is_same_v<Result, PrimitivePair>;
  if constexpr (kTensorResult) {
    Result result{};
    // args stay held here: a failed capture runs the op again from them.
    std::shared_ptr<Recording> recording = capture_alone(
        [&](Session& session) { result = session.call<code>(inner(), Args(args)...); });
    if (recording != nullptr) {
      std::vector<Primitive> results;
      if constexpr (std::is_same_v<Result, Primitive>) {
        results = {result};
      } else {
        results = {result.first, result.second};
      }
      check_replay(*recording, op_info(code).name, results);
      return result;
    }
  }
  return (inner().*ir::OpTraits<code>::kMethod)(std::move(args)...);
}

}  // namespace kiln::capturing
