// Capturing elementwise ops into one fused kernel (cuda_fused.cpp). While a KernelCapture is
// active on a thread, the CUDA backend's ops run as usual up to their launch: make_tensor hands
// out a placeholder (shape and dtype, no memory) and launch_elementwise records the op's
// description instead of launching it. So every op built from the elementwise family (map_unary,
// map_binary, mask_where, cast, the activations...) is captured with the exact expression its
// eager kernel runs, and nothing is written twice. Anything else an op does on the device (another
// kernel family, a library call, a read) throws NotCapturable from the capture check, and the
// caller rolls the capture back to before that op and runs it eagerly.
//
// A reduction or softmax along a dim whose input is a value of the capture ends it as its tail:
// reduce_dim and softmax record what they would launch (CaptureTail), and run() launches their
// kernels with the chain evaluated at each element they read, so that value is never written
// unless something else still needs it.
//
// A reduction may also be the first op of a capture, over a tensor; then elementwise ops of its
// result's shape that read that result, tensors and each other are its epilogue: run() launches
// the reduction's kernels with those ops on each result they write (an optimizer's update of a
// bias after its gradient's sum), and only the values still needed are written.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backends/cuda/fused_kernel.h"
#include "backends/cuda/runtime.h"

namespace kiln::cuda {

// Thrown inside an op under capture: the op cannot be part of a fused kernel (or, with full,
// this kernel has no room left for it).
struct NotCapturable {
  bool full = false;
};

// Elementwise ops on each result of a tail (its epilogue) in the tail's kernels: the generated
// ops (fused_epilogue_source: input 0 the result) and their parameters.
struct TailEpilogue {
  const FusedKernel* kernel = nullptr;
  const std::string* key = nullptr;  // fused_kernel_key(*kernel)
  FusedParams params{};
};

// The last step of a capture: an op along a dim over one captured value.
struct CaptureTail {
  std::int64_t dim = 0;
  // Launches the op's kernels reading the value through load (the chain's parameters: chain);
  // returns the op's result.
  std::function<TensorPtr(Runtime&, const FusedLoad& load, const FusedTailParams& chain)> fused;
  // The op on the value written out, where the chain and the op cannot be one kernel.
  std::function<TensorPtr(Runtime&, const CudaTensor& x)> eager;
  // The op on a tensor with epilogue's ops on each of its results (its result is written too);
  // empty for an op that takes no epilogue (softmax): it is then never a capture's first op.
  std::function<TensorPtr(Runtime&, const CudaTensor& x, const TailEpilogue& epilogue)>
      with_epilogue;
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
  // Records the op along a dim over x as this capture's tail; returns the op's result placeholder
  // (dtype, shape). x is a result of this capture, or a tensor when the capture has no ops yet
  // and the op takes an epilogue (CaptureTail::with_epilogue). After a tail over a captured
  // value nothing is captured; after one over a tensor, elementwise ops of the result's shape that
  // read no value of the ops before it (its epilogue).
  TensorPtr record_tail(const CudaTensor& x, DType dtype, const Shape& shape, CaptureTail tail);

  // ---- the fused group's runner ----
  const Shape& shape() const noexcept { return shape_; }
  // The shape of the ops this capture may take next: its tail's result's once it has a tail.
  const Shape& open_shape() const noexcept { return tail_ ? tail_->shape : shape_; }
  // Whether elementwise ops may follow the tail (a tail over a tensor that takes an epilogue).
  bool takes_epilogue() const noexcept {
    return tail_ && tail_->operand < 0 && tail_->run.with_epilogue != nullptr;
  }
  bool empty() const noexcept { return ops_.empty() && !tail_; }
  // The captured results: one per op, then the tail's.
  std::size_t results() const noexcept { return ops_.size() + (tail_ ? 1 : 0); }
  struct Mark {
    std::size_t ops, inputs, scalars, failures, placeholders;
    bool tail;
  };
  Mark mark() const noexcept {
    return {ops_.size(), inputs_.size(),       scalars_.size(),
            failures_,   placeholders_.size(), tail_.has_value()};
  }
  void roll_back(const Mark& mark);
  // The result whose placeholder p is: an op's index, or ops for the tail's (-1: p is not a
  // result of this capture).
  std::int32_t op_of(const CudaTensor* p) const noexcept;
  // Whether p is a placeholder handed out by this capture (recorded or not).
  bool is_placeholder(const CudaTensor* p) const noexcept;

  // Runs the captured ops, writing the results flagged in wanted (one flag per result); returns
  // one tensor per result (null where not wanted). One kernel for the run (with its tail: the
  // tail's kernels), or the ops one by one where a single op or the views' layout makes a fused
  // kernel pointless (then the tail reads the value written out). into (empty, or one per op
  // result): a dense tensor of the result's dtype and shape that a kernel of the run without a
  // tail may write the result into, returned as the result (FusedProgram::write_into).
  std::vector<TensorPtr> run(Runtime& runtime, const std::vector<bool>& wanted,
                             std::span<const TensorPtr> into = {});

  // ---- a capture kept to run again (cuda_fused.cpp's plans) ----
  // The tensors the captured ops read that no op of the capture computes.
  std::size_t input_count() const noexcept { return inputs_.size(); }
  const CudaTensor* input(std::size_t k) const noexcept { return inputs_[k].tensor; }
  // Runs on other tensors of the same dtypes, shapes and strides (null: none, between runs).
  void rebind_inputs(std::span<const CudaTensor* const> tensors) noexcept;
  // Ends the capture for good: its placeholders go (op_of and is_placeholder no longer answer),
  // what run() needs stays.
  void forget_placeholders() noexcept;

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
  struct Tail {
    CaptureTail run;
    std::int32_t operand;  // the op whose value it reads, or input -1 - operand
    DType dtype;           // that value's dtype as the tail reads it
    const CudaTensor* result;
    Shape shape;  // the result's
    DType result_dtype;
    // Ops from this one on are the epilogue (a tail over an input only).
    std::size_t first_epilogue_op;
  };
  // The operand an epilogue op gives for the tail's result.
  static constexpr std::int32_t kTailResult = std::numeric_limits<std::int32_t>::max();
  // Ops before the tail's epilogue: those of the chain (all of them without a tail).
  std::size_t chain_ops() const noexcept { return tail_ ? tail_->first_epilogue_op : ops_.size(); }
  enum class Layout { Flat, Strided, TooManyDims };

  std::int32_t operand_of(const CudaTensor* tensor);
  std::vector<TensorPtr> run_ops(Runtime& runtime, const std::vector<bool>& wanted,
                                 std::span<const TensorPtr> into = {});
  std::vector<TensorPtr> run_one_by_one(Runtime& runtime, const std::vector<bool>& wanted);
  std::vector<TensorPtr> run_with_tail(Runtime& runtime, const std::vector<bool>& wanted);
  std::vector<TensorPtr> run_tail_alone(Runtime& runtime, const std::vector<bool>& wanted);
  // A tail over an input with its epilogue's wanted ops in its kernels (into as for run).
  std::vector<TensorPtr> run_tail_over_input(Runtime& runtime, const std::vector<bool>& wanted,
                                             std::span<const TensorPtr> into);
  // The epilogue's ops one by one after the tail's result (more results wanted than a kernel
  // writes), into results.
  void run_epilogue_one_by_one(Runtime& runtime, const TensorPtr& result,
                               const std::vector<bool>& wanted, std::span<const TensorPtr> into,
                               std::vector<TensorPtr>& results);
  // The ops flagged in wanted, in order.
  std::vector<std::int32_t> wanted_ops(const std::vector<bool>& wanted) const;
  // Whether wanted flags exactly the ops of outputs (ascending).
  bool wants_exactly(const std::vector<bool>& wanted,
                     const std::vector<std::int32_t>& outputs) const;
  // The generated kernel of the ops, writing the values of outputs.
  FusedKernel kernel_of(const std::vector<std::int32_t>& outputs) const;
  // The inputs' layout; for Strided, the merged dims and strides in params.
  Layout layout(FusedParams& params) const;
  // Whether kiln_fused_rows runs the kernel on params' merged dims (fused_kernel.h), with each
  // input's mode in modes and width elements a vector (fused_rows_width, else
  // fused_vector_width where the rows or the pointers do not hold whole vectors of that).
  static bool rows_modes(const FusedParams& params, const FusedKernel& kernel, std::size_t outputs,
                         std::string& modes, std::int64_t& width);
  // The tensors of outputs (in results), their addresses, the inputs', the scalars and the
  // error tokens in params.
  // The scalars and the error tokens of every op (bind, and an epilogue's parameters).
  void bind_scalars(Runtime& runtime, FusedParams& params) const;
  void bind(Runtime& runtime, const std::vector<std::int32_t>& outputs,
            std::span<const TensorPtr> into, std::vector<TensorPtr>& results,
            FusedParams& params) const;

  Shape shape_;
  std::vector<Op> ops_;
  std::vector<Input> inputs_;
  std::vector<std::uint64_t> scalars_;
  std::size_t failures_ = 0;
  std::optional<Tail> tail_;
  std::vector<TensorPtr> placeholders_;  // kept so that no address is reused during the capture
  // The kernel of the last run_ops and its cache key, and the load of the last run_with_tail (a
  // capture run again writes the same outputs: none is built twice).
  struct Compiled {
    std::vector<std::int32_t> outputs;
    FusedKernel kernel;
    std::string key;
    std::string rows_key;  // kiln_fused_rows's: key's layout letter 'r', then the input modes
  };
  std::optional<Compiled> compiled_;
  struct CompiledTail {
    std::vector<std::int32_t> outputs;
    FusedLoad load;  // its key set
  };
  std::optional<CompiledTail> compiled_tail_;
  struct CompiledEpilogue {
    std::vector<std::int32_t> outputs;  // the epilogue ops written
    FusedKernel kernel;
    std::string key;
    std::vector<std::int32_t> inputs;  // the capture's input behind each kernel input from 1 on
  };
  std::optional<CompiledEpilogue> compiled_epilogue_;
};

}  // namespace kiln::cuda
