// A capture in progress (kiln/graph.h): the ops one thread runs on one device between capture's
// start and end, recorded as they run. The recording is a list of steps over numbered values:
// an op of ops.def (an ir::Op), a fused group (what the fusion decorator hands the hardware), or
// an in-place write (assign). A tensor the region reads that it did not make is an input: the
// recording holds it, and a replay reads its storage as it is then (Tensor::assign changes it).
// A value the region made and someone still holds when it ends is an output: a replay writes the
// new value into its storage.
//
// CaptureBackend (capture_backend.h) is the bottom layer of every device's chain; it records
// into the session open on the calling thread for its device and otherwise only forwards.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "contract/fused_program.h"
#include "core/function_ref.h"
#include "ir/op_ir.h"

namespace kiln::capturing {

// One recorded step.
struct Step {
  enum class Kind : std::uint8_t { Op, Fused, Assign };
  Kind kind = Kind::Op;
  ir::Op op;                                  // Kind::Op; for the others, inputs and outputs alone
  std::shared_ptr<const FusedProgram> fused;  // Kind::Fused: the group, its leaves empty
  // Per input of op: the value's last use is this step, so the replay hands it over.
  std::unique_ptr<bool[]> take;
  // Per output of op: nothing reads it later and nobody holds it, so the replay drops it at once.
  std::unique_ptr<bool[]> drop;
};

// What a finished capture replays.
struct Recording {
  Recording() noexcept { alive_.fetch_add(1, std::memory_order_relaxed); }
  ~Recording() { alive_.fetch_sub(1, std::memory_order_relaxed); }
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;
  static std::int64_t alive() noexcept { return alive_.load(std::memory_order_relaxed); }
  static inline std::atomic<std::int64_t> alive_{0};

  Device device = Device::cpu();  // the hardware (no decorator flags)
  std::vector<std::pair<ir::TensorId, Primitive>> inputs;
  std::vector<Step> steps;
  std::vector<std::pair<ir::TensorId, std::weak_ptr<TensorPrimitive>>> outputs;
  std::uint32_t value_count = 0;
  std::unique_ptr<DeviceGraph> device_graph;  // the device's own recording, when it has one
  // Host work before each replay (and, with a device graph, before the first run): values a
  // replay must take afresh from the host (Session::add_hook).
  std::vector<std::function<void(bool replay)>> hooks;

  // Runs the steps on backend (the hardware) and writes the outputs still held.
  void replay(Backend& backend) const;
  // One line per step ("%4 = add(%1, %3)"), for messages and tests.
  std::string describe() const;
};

class Session final : public ir::IdSource {
 public:
  explicit Session(Device hardware) : hardware_(hardware) {}

  const Device& device() const noexcept { return hardware_; }
  // The session open on this thread, or null. Captures in any thread open: checked first, so a
  // process that never captures pays one relaxed load per op.
  static Session* active() noexcept {
    if (open_count_.load(std::memory_order_relaxed) == 0) [[likely]]
      return nullptr;
    return active_;
  }

  // Suspends the session open on this thread for its lifetime: ops run unrecorded.
  class Pause {
   public:
    Pause() noexcept : paused_(active_) {
      active_ = nullptr;
      ++pauses_;
    }
    ~Pause() {
      active_ = paused_;
      --pauses_;
    }
    Pause(const Pause&) = delete;
    Pause& operator=(const Pause&) = delete;

   private:
    Session* paused_;
  };

  // Host work the recording runs before each replay with replay true, and, when the device keeps
  // its own recording (whose first run is after capture), once before that run with false.
  void add_hook(std::function<void(bool replay)> hook) { hooks_.push_back(std::move(hook)); }
  // Whether the device keeps its own recording (cuda): the region's ops run only after capture.
  bool device_records() const noexcept { return device_records_; }
  void set_device_records(bool records) noexcept { device_records_ = records; }

  // Opens session on this thread for its lifetime (captures do not nest: InvalidArgument).
  class Scope {
   public:
    explicit Scope(Session& session);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
  };

  ir::TensorId id_of(const Primitive& tensor) override;

  // Runs op code on inner with args, recording it. InvalidArgument naming the op for what a
  // replay cannot repeat (refuse). Made per op, for this library only: not exported.
  template <OpCode code, class... Args>
  [[gnu::visibility("hidden")]] auto call(Backend& inner, Args&&... args);
  template <OpCode code, class... Args>
  [[gnu::visibility("hidden")]] auto record_call(Backend& inner, Args&&... args);
  // random inside a region: a tensor the region reads as an input, drawn afresh from the device's
  // random stream before each replay (a hook), so replays draw what eager steps would.
  Primitive random_input(Backend& inner, Shape shape, Distribution distribution, DType dtype,
                         Device device);
  std::vector<Primitive> call_fused(Backend& inner, const FusedProgram& program);
  void call_assign(Backend& inner, const Primitive& dst, Primitive src);
  // What a replay cannot repeat, refused at capture.
  [[noreturn]] static void refuse(std::string_view op, std::string_view why);
  static void refuse_if_uncapturable(OpCode code);

  // The recording of what ran, with the device's own recording attached.
  std::shared_ptr<Recording> finish(std::unique_ptr<DeviceGraph> device_graph);

  // Whether a Pause is in force on this thread: memory allocated now is written by the host before
  // the graph runs, so a device must not give it memory the graph's own ops use first (the CUDA
  // allocator's pool).
  static bool paused_here() noexcept;

 private:
  struct Entry {
    ir::TensorId id;
    std::weak_ptr<TensorPrimitive> weak;
  };
  ir::TensorId add_output(const Primitive& tensor);
  // Appends step with outputs as its op's outputs.
  void push(Step step, std::span<const Primitive> outputs = {});
  // Records op (out of line: one copy serves every op).
  void push_op(ir::Op op, std::span<const Primitive> outputs);

  static inline std::atomic<int> open_count_{0};
  static thread_local int pauses_;
  static inline thread_local Session* active_ = nullptr;

  Device hardware_;
  std::uint32_t next_id_ = 0;
  std::unordered_map<const TensorPrimitive*, Entry> ids_;
  std::vector<std::pair<ir::TensorId, Primitive>> inputs_;
  std::vector<std::pair<ir::TensorId, std::weak_ptr<TensorPrimitive>>> made_;
  std::vector<Step> steps_;
  std::vector<std::function<void(bool)>> hooks_;
  bool device_records_ = false;
};

// Runs region with a session of hardware's open on this thread and the device's own recording
// (bottom: the hardware, or the capture layer over it) around it, and returns what it recorded.
// When the device kept its own recording, the region's one run is launched (after the hooks).
// If region throws, the device's recording is discarded and the exception propagates.
std::shared_ptr<Recording> record_region(Backend& bottom, const Device& hardware,
                                         detail::FunctionRef<void()> region);

template <OpCode code, class... Args>
auto Session::call(Backend& inner, Args&&... args) {
  if constexpr (code == OpCode::random) {
    return random_input(inner, std::forward<Args>(args)...);
  } else {
    return record_call<code>(inner, std::forward<Args>(args)...);
  }
}

template <OpCode code, class... Args>
auto Session::record_call(Backend& inner, Args&&... args) {
  refuse_if_uncapturable(code);
  ir::Op op = ir::Call<code>::make(*this, args...);
  auto result = (inner.*ir::OpTraits<code>::kMethod)(std::forward<Args>(args)...);
  using Result = decltype(result);
  if constexpr (std::is_same_v<Result, Primitive>) {
    push_op(std::move(op), {&result, 1});
  } else if constexpr (std::is_same_v<Result, PrimitivePair>) {
    const Primitive pair[] = {result.first, result.second};
    push_op(std::move(op), pair);
  } else {
    push_op(std::move(op), {});
  }
  return result;
}

}  // namespace kiln::capturing
