// Capturing elementwise ops into one fused kernel (cuda_fused.cpp). While a KernelCapture is
// active on a thread, the CUDA backend's ops run as usual up to their launch: make_tensor hands
// out a placeholder (shape and dtype, no memory) and launch_elementwise records the op's
// description instead of launching it. So every op built from the elementwise family (map_unary,
// map_binary, mask_where, cast, the activations...) is captured with the exact expression its
// eager kernel runs, and nothing is written twice. Anything else an op does on the device (another
// kernel family, a library call, a read) throws NotCapturable from the capture check, and the
// caller rolls the capture back to before that op and runs it eagerly.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backends/cuda/fused_kernel.h"
#include "backends/cuda/runtime.h"

namespace kiln::cuda {

// Thrown inside an op under capture: the op cannot be part of a fused kernel (or, with full,
// this kernel has no room left for it).
struct NotCapturable {
  bool full = false;
};

class KernelCapture {
 public:
  explicit KernelCapture(Shape shape) : shape_(std::move(shape)) {}
  KernelCapture(const KernelCapture&) = delete;
  KernelCapture& operator=(const KernelCapture&) = delete;

  // The capture active on this thread, or null.
  static KernelCapture* active() noexcept;
  // Throws NotCapturable when a capture is active: for device work that cannot be captured.
  static void refuse_if_active() {
    if (active() != nullptr) throw NotCapturable{};
  }

  // Makes this capture the active one for the scope.
  class Scope {
   public:
    explicit Scope(KernelCapture& capture);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    KernelCapture* previous_;
  };

  // ---- the backend's hooks (runtime.cpp, elementwise.cpp) ----
  TensorPtr placeholder(DType dtype, const Shape& shape, Device device);
  void record(const ElementwiseOp& op, const CudaTensor& out,
              std::span<const CudaTensor* const> inputs, std::span<const std::uint64_t> scalars);

  // ---- the fused group's runner ----
  const Shape& shape() const noexcept { return shape_; }
  bool empty() const noexcept { return ops_.empty(); }
  struct Mark {
    std::size_t ops, inputs, scalars, failures, placeholders;
  };
  Mark mark() const noexcept {
    return {ops_.size(), inputs_.size(), scalars_.size(), failures_, placeholders_.size()};
  }
  void roll_back(const Mark& mark);
  // The op whose result placeholder p is (-1: p is not a result of this capture).
  std::int32_t op_of(const CudaTensor* p) const noexcept;
  // Whether p is a placeholder handed out by this capture (recorded or not).
  bool is_placeholder(const CudaTensor* p) const noexcept;

  // Runs the captured ops, writing the results of the ops flagged in wanted (one flag per op);
  // returns one tensor per op (null where not wanted). One kernel for the run, or the ops one by
  // one where a single op or the views' layout makes a fused kernel pointless.
  std::vector<TensorPtr> run(Runtime& runtime, const std::vector<bool>& wanted);

 private:
  struct Input {
    const CudaTensor* tensor;
  };
  struct Op {
    ElementwiseOp spec;
    std::array<std::int32_t, 3> operands{};  // >= 0: an op; < 0: input -1 - operand
    std::int32_t first_scalar = 0;
    std::int32_t failure = -1;
    DType dtype = DType::F32;  // the result tensor's dtype (spec.output, or one of its width)
    const CudaTensor* result = nullptr;
  };
  std::int32_t operand_of(const CudaTensor* tensor);
  std::vector<TensorPtr> run_one_by_one(Runtime& runtime, const std::vector<bool>& wanted);

  Shape shape_;
  std::vector<Op> ops_;
  std::vector<Input> inputs_;
  std::vector<std::uint64_t> scalars_;
  std::size_t failures_ = 0;
  std::vector<TensorPtr> placeholders_;  // kept so that no address is reused during the capture
};

}  // namespace kiln::cuda
