// A fused group on the GPU: runs of elementwise steps become one generated kernel each.
//
// Each elementwise step runs its ordinary op method under a KernelCapture (kernel_capture.h), so
// the kernel holds the same expressions the eager kernels run. A reduction or softmax along a
// dim over a value of the run ends the run as its tail: its own kernels evaluate the chain at
// each element they read. Any other step that does device work ends the run: the captured ops
// whose values are read later are written by one kernel (compiled once per structure, kept by
// the kernel caches), then the step runs eagerly on real tensors, and a new run begins after it.
#include <cstdlib>
#include <cstring>
#include <limits>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernel_capture.h"
#include "contract/fused_program.h"

namespace kiln::cuda {

namespace {

constexpr std::size_t kOpCount = 0
#define KILN_OP(name, ...) +1
#include "kiln/detail/ops.def"
#undef KILN_OP
    ;

// Ops that refused a capture once (they do more than elementwise kernels): not tried again.
std::atomic<bool> refused[kOpCount];

bool fusing_enabled() {
  static const bool enabled = [] {
    const char* text = std::getenv("KILN_CUDA_FUSE");
    return text == nullptr || std::strcmp(text, "0") != 0;
  }();
  return enabled;
}

}  // namespace

std::vector<Primitive> CudaBackend::run_fused(const FusedProgram& program) {
  if (!fusing_enabled()) return run_steps(*this, program);
  const std::vector<std::int32_t> last_use = last_uses(program);
  const std::size_t leaves = program.leaves.size();
  std::vector<Primitive> values(program.leaves);
  values.resize(leaves + program.steps.size());
  std::unique_ptr<KernelCapture> capture;
  std::size_t capture_start = 0;  // the first step of the run being captured

  // Writes the captured run's values that step `next` or a later one reads (or that are outputs)
  // and puts the real tensors in place of the placeholders.
  auto close = [&](std::size_t next) {
    if (!capture) return;
    std::vector<bool> wanted(capture->results(), false);
    for (std::size_t s = capture_start; s < next; ++s) {
      const std::size_t v = leaves + s;
      const std::int32_t op = capture->op_of(static_cast<const CudaTensor*>(values[v].get()));
      if (op >= 0 && last_use[v] >= static_cast<std::int32_t>(next)) wanted[op] = true;
    }
    const std::vector<TensorPtr> results = capture->run(runtime_, wanted);
    for (std::size_t s = capture_start; s < next; ++s) {
      Primitive& value = values[leaves + s];
      const auto* tensor = static_cast<const CudaTensor*>(value.get());
      if (!capture->is_placeholder(tensor)) continue;
      const std::int32_t op = capture->op_of(tensor);
      value = op >= 0 ? Primitive(results[static_cast<std::size_t>(op)]) : Primitive();
    }
    capture.reset();
  };

  // Runs step i under the capture; when it cannot be captured, leaves the capture as it was.
  enum class Outcome { Captured, Refused, Full };
  auto try_capture = [&](std::size_t i, const FusedStep& step) {
    if (!capture) {
      capture = std::make_unique<KernelCapture>(step.shape);
      capture_start = i;
    }
    const KernelCapture::Mark mark = capture->mark();
    std::array<Primitive, 3> inputs;
    for (std::uint8_t k = 0; k < step.arity; ++k) {
      inputs[k] = values[static_cast<std::size_t>(step.inputs[k])];  // held: never reused
    }
    try {
      KernelCapture::Scope scope(*capture);
      Primitive out =
          step.run(*this, std::span<Primitive>(inputs.data(), step.arity), step.params, step.shape);
      const auto* tensor = static_cast<const CudaTensor*>(out.get());
      if (capture->is_placeholder(tensor) && capture->op_of(tensor) < 0) throw NotCapturable{};
      values[leaves + i] = std::move(out);
      return Outcome::Captured;
    } catch (const NotCapturable& refusal) {
      capture->roll_back(mark);
      if (refusal.full) return Outcome::Full;
      refused[static_cast<std::size_t>(step.op)].store(true);
      return Outcome::Refused;
    }
  };

  // Whether step (along a dim) reads a value the captured run computes: then it may be its tail.
  auto reads_capture = [&](const FusedStep& step) {
    if (!capture) return false;
    const auto* x =
        static_cast<const CudaTensor*>(values[static_cast<std::size_t>(step.inputs[0])].get());
    return capture->is_placeholder(x) && capture->op_of(x) >= 0;
  };

  for (std::size_t i = 0; i < program.steps.size(); ++i) {
    const FusedStep& step = program.steps[i];
    const bool tried = !refused[static_cast<std::size_t>(step.op)].load(std::memory_order_relaxed);
    if (tried && step.dim() < 0) {
      if (capture && !(capture->shape() == step.shape)) close(i);
      Outcome outcome = try_capture(i, step);
      if (outcome == Outcome::Full && !capture->empty()) {  // it may fit a kernel of its own
        close(i);
        outcome = try_capture(i, step);
      }
      if (outcome == Outcome::Captured) continue;
    } else if (tried && step.arity == 1 && reads_capture(step)) {
      if (try_capture(i, step) == Outcome::Captured) {
        close(i + 1);  // nothing follows a tail in its kernel
        continue;
      }
    }
    close(i);
    run_step(*this, program, i, last_use, values);
  }
  close(program.steps.size());

  std::vector<Primitive> outputs;
  outputs.reserve(program.outputs.size());
  for (std::int32_t out : program.outputs) {
    outputs.push_back(std::move(values[leaves + static_cast<std::size_t>(out)]));
  }
  return outputs;
}

}  // namespace kiln::cuda
