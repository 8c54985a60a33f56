#include "backends/cuda/kernel_capture.h"

#include <algorithm>

#include "contract/strided.h"

namespace kiln::cuda {

namespace {

thread_local KernelCapture* active_capture = nullptr;

// More ops than a fused group holds (64) only arise from ops made of several kernels.
constexpr std::size_t kMaxCapturedOps = 96;

}  // namespace

KernelCapture* KernelCapture::active() noexcept { return active_capture; }

KernelCapture::Scope::Scope(KernelCapture& capture) : previous_(active_capture) {
  active_capture = &capture;
}
KernelCapture::Scope::~Scope() { active_capture = previous_; }

TensorPtr KernelCapture::placeholder(DType dtype, const Shape& shape, Device device) {
  auto p = std::make_shared<CudaTensor>(dtype, shape, device, nullptr);
  placeholders_.push_back(p);
  return p;
}

bool KernelCapture::is_placeholder(const CudaTensor* p) const noexcept {
  return std::any_of(placeholders_.begin(), placeholders_.end(),
                     [p](const TensorPtr& q) { return q.get() == p; });
}

std::int32_t KernelCapture::op_of(const CudaTensor* p) const noexcept {
  if (tail_ && tail_->result == p) return static_cast<std::int32_t>(ops_.size());
  for (std::size_t k = ops_.size(); k-- > 0;) {
    if (ops_[k].result == p) return static_cast<std::int32_t>(k);
  }
  return -1;
}

std::int32_t KernelCapture::operand_of(const CudaTensor* tensor) {
  if (tail_ && tensor == tail_->result) return kTailResult;
  if (is_placeholder(tensor)) {
    const std::int32_t op = op_of(tensor);
    if (op < 0) throw NotCapturable{};  // a placeholder no kernel wrote
    return op;
  }
  // A view of a placeholder (an op that reshapes or expands its operand first) has no storage
  // either, and no value the kernel computes at its positions.
  if (tensor->storage() == nullptr) throw NotCapturable{};
  for (std::size_t k = 0; k < inputs_.size(); ++k) {
    if (inputs_[k].tensor == tensor) return -1 - static_cast<std::int32_t>(k);
  }
  if (inputs_.size() == kMaxFusedInputs) throw NotCapturable{.full = true};
  inputs_.push_back({tensor});
  return -static_cast<std::int32_t>(inputs_.size());
}

void KernelCapture::record(const ElementwiseOp& op, const CudaTensor& out,
                           std::span<const CudaTensor* const> inputs,
                           std::span<const std::uint64_t> scalars) {
  // Gathering ops read other elements than their own; an output that is no fresh placeholder
  // (an op writing into a tensor it was given) or of another shape is not an element of this
  // kernel's iteration.
  // After a tail, only its epilogue: ops of its result's shape (another op may fit a capture of
  // its own, so the refusal says only that this one is full).
  if (tail_ && (!takes_epilogue() || !(out.shape() == tail_->shape)))
    throw NotCapturable{.full = true};
  if (op.gathered_input >= 0 || !is_placeholder(&out) || op_of(&out) >= 0 ||
      (!tail_ && !(out.shape() == shape_)) || inputs.size() != op.inputs.size() ||
      inputs.size() > 3 || dtype_size(out.dtype()) != dtype_size(op.output)) {
    throw NotCapturable{};
  }
  if (ops_.size() == kMaxCapturedOps) throw NotCapturable{.full = true};
  Op rec{.spec = op, .dtype = out.dtype(), .result = &out};
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    if (dtype_size(inputs[k]->dtype()) != dtype_size(op.inputs[k])) throw NotCapturable{};
    rec.operands[k] = operand_of(inputs[k]);
  }
  if (scalars_.size() + scalars.size() > kMaxFusedScalars) throw NotCapturable{.full = true};
  rec.first_scalar = static_cast<std::int32_t>(scalars_.size());
  scalars_.insert(scalars_.end(), scalars.begin(), scalars.end());
  if (op.failure != nullptr) {
    if (failures_ == kMaxFusedFailures) throw NotCapturable{.full = true};
    rec.failure = static_cast<std::int32_t>(failures_++);
  }
  ops_.push_back(std::move(rec));
}

TensorPtr KernelCapture::record_tail(const CudaTensor& x, DType dtype, const Shape& shape,
                                     CaptureTail tail) {
  // (Refusals say "full": they depend on what was captured before, not on the op.)
  if (tail_) throw NotCapturable{.full = true};
  std::int32_t operand = 0;
  if (is_placeholder(&x)) {
    operand = op_of(&x);
    if (operand < 0) throw NotCapturable{.full = true};
  } else {
    if (!ops_.empty() || tail.with_epilogue == nullptr || shape.rank() > kMaxFusedDims)
      throw NotCapturable{.full = true};
    operand = operand_of(&x);
  }
  TensorPtr out = placeholder(dtype, shape, x.device());
  tail_ = Tail{.run = std::move(tail),
               .operand = operand,
               .dtype = x.dtype(),
               .result = out.get(),
               .shape = shape,
               .result_dtype = dtype,
               .first_epilogue_op = ops_.size()};
  return out;
}

void KernelCapture::rebind_inputs(std::span<const CudaTensor* const> tensors) noexcept {
  for (std::size_t k = 0; k < inputs_.size(); ++k) {
    inputs_[k].tensor = k < tensors.size() ? tensors[k] : nullptr;
  }
}

void KernelCapture::forget_placeholders() noexcept {
  placeholders_.clear();
  for (Op& op : ops_) op.result = nullptr;
  if (tail_) tail_->result = nullptr;
}

void KernelCapture::roll_back(const Mark& mark) {
  if (!mark.tail) tail_.reset();
  ops_.resize(mark.ops);
  inputs_.resize(mark.inputs);
  scalars_.resize(mark.scalars);
  failures_ = mark.failures;
  placeholders_.resize(mark.placeholders);
}

std::vector<TensorPtr> KernelCapture::run_one_by_one(Runtime& runtime,
                                                     const std::vector<bool>& wanted) {
  // Each op's result is dropped after the last op that reads it, as eager execution would.
  std::vector<std::size_t> last_read(ops_.size(), 0);
  for (std::size_t k = 0; k < ops_.size(); ++k) {
    for (std::size_t j = 0; j < ops_[k].spec.inputs.size(); ++j) {
      if (ops_[k].operands[j] >= 0) last_read[static_cast<std::size_t>(ops_[k].operands[j])] = k;
    }
  }
  std::vector<TensorPtr> results(ops_.size());
  for (std::size_t k = 0; k < ops_.size(); ++k) {
    const Op& op = ops_[k];
    const CudaTensor* inputs[3] = {};
    for (std::size_t j = 0; j < op.spec.inputs.size(); ++j) {
      const std::int32_t operand = op.operands[j];
      inputs[j] = operand >= 0 ? results[static_cast<std::size_t>(operand)].get()
                               : inputs_[static_cast<std::size_t>(-1 - operand)].tensor;
    }
    results[k] = runtime.make_tensor(op.dtype, shape_, op.spec.name);
    launch_elementwise(
        runtime, op.spec, *results[k],
        std::span<const CudaTensor* const>(inputs, op.spec.inputs.size()),
        std::span<const std::uint64_t>(scalars_.data() + op.first_scalar, op.spec.scalars.size()));
    for (std::size_t j = 0; j < op.spec.inputs.size(); ++j) {
      const std::int32_t operand = op.operands[j];
      if (operand >= 0 && last_read[static_cast<std::size_t>(operand)] == k &&
          !wanted[static_cast<std::size_t>(operand)]) {
        results[static_cast<std::size_t>(operand)].reset();
      }
    }
  }
  for (std::size_t k = 0; k < ops_.size(); ++k) {
    if (!wanted[k]) results[k].reset();
  }
  return results;
}

std::vector<std::int32_t> KernelCapture::wanted_ops(const std::vector<bool>& wanted) const {
  std::vector<std::int32_t> outputs;
  for (std::size_t k = 0; k < ops_.size(); ++k) {
    if (wanted[k]) outputs.push_back(static_cast<std::int32_t>(k));
  }
  return outputs;
}

bool KernelCapture::wants_exactly(const std::vector<bool>& wanted,
                                  const std::vector<std::int32_t>& outputs) const {
  std::size_t j = 0;
  for (std::size_t k = 0; k < ops_.size(); ++k) {
    if (!wanted[k]) continue;
    if (j == outputs.size() || outputs[j] != static_cast<std::int32_t>(k)) return false;
    ++j;
  }
  return j == outputs.size();
}

FusedKernel KernelCapture::kernel_of(const std::vector<std::int32_t>& outputs) const {
  FusedKernel kernel;
  for (const Input& in : inputs_) kernel.inputs.push_back(in.tensor->dtype());
  const auto value_of = [&](std::int32_t operand) {
    return operand >= 0 ? kernel.value_of_op(static_cast<std::size_t>(operand)) : -1 - operand;
  };
  for (const Op& op : ops_) {
    FusedKernelOp f{.op = op.spec, .first_scalar = op.first_scalar, .failure = op.failure};
    for (std::size_t j = 0; j < op.spec.inputs.size(); ++j)
      f.operands[j] = value_of(op.operands[j]);
    kernel.ops.push_back(std::move(f));
  }
  for (std::int32_t k : outputs) {
    kernel.outputs.push_back(
        {kernel.value_of_op(static_cast<std::size_t>(k)), ops_[static_cast<std::size_t>(k)].dtype});
  }
  return kernel;
}

KernelCapture::Layout KernelCapture::layout(FusedParams& params) const {
  bool flat = true;
  for (const Input& in : inputs_) {
    flat = flat && in.tensor->is_contiguous() && in.tensor->shape() == shape_;
  }
  if (flat) return Layout::Flat;
  std::vector<Strides> strides;
  strides.reserve(inputs_.size());
  for (const Input& in : inputs_) strides.push_back(broadcast_strides(*in.tensor, shape_));
  params.rank = merge_dims(shape_, strides, params.sizes, &params.strides[0][0], kMaxFusedDims,
                           kMaxFusedDims);
  if (params.rank < 0) return Layout::TooManyDims;
  // Views that merge into one contiguous run (size-1 dims, broadcast rank) are flat too.
  flat = params.rank <= 1;
  for (std::size_t k = 0; k < inputs_.size() && params.rank == 1; ++k) {
    if (params.strides[k][0] != 1) flat = false;
  }
  return flat ? Layout::Flat : Layout::Strided;
}

bool KernelCapture::rows_modes(const FusedParams& params, const FusedKernel& kernel,
                               std::size_t outputs, std::string& modes, std::int64_t& width) {
  // kiln_fused_rows (fused_kernel.h): two merged dims, whole vectors per row, every input a
  // row-major operand, a broadcast row or a value per row, and every vector pointer aligned.
  if (params.rank != 2) return false;
  const std::int64_t cols = params.sizes[1];
  modes.clear();
  for (std::size_t k = 0; k < kernel.inputs.size(); ++k) {
    const std::int64_t along_rows = params.strides[k][0], along_cols = params.strides[k][1];
    if (along_cols == 0) {
      modes += 'c';
    } else if (along_cols == 1 && (along_rows == cols || along_rows == 0)) {
      modes += along_rows == 0 ? 'r' : 'f';
    } else {
      return false;
    }
  }
  auto fits = [&](std::int64_t w) {
    auto on_vector = [&](std::uint64_t pointer, DType dtype) {
      return pointer % std::min<std::uint64_t>(16, std::uint64_t(w) * dtype_size(dtype)) == 0;
    };
    if (cols % w != 0) return false;
    for (std::size_t k = 0; k < kernel.inputs.size(); ++k) {
      if (modes[k] != 'c' && !on_vector(params.in[k], kernel.inputs[k])) return false;
    }
    for (std::size_t j = 0; j < outputs; ++j) {
      if (!on_vector(params.out[j], kernel.outputs[j].dtype)) return false;
    }
    return true;
  };
  for (const std::int64_t w : {fused_rows_width(kernel, modes), fused_vector_width(kernel)}) {
    if (fits(w)) {
      width = w;
      return true;
    }
  }
  return false;
}

void KernelCapture::bind(Runtime& runtime, const std::vector<std::int32_t>& outputs,
                         std::span<const TensorPtr> into, std::vector<TensorPtr>& results,
                         FusedParams& params) const {
  params.n = shape_.num_elements();
  for (std::size_t k = 0; k < inputs_.size(); ++k) params.in[k] = inputs_[k].tensor->data();
  for (std::size_t j = 0; j < outputs.size(); ++j) {
    const auto r = static_cast<std::size_t>(outputs[j]);
    const Op& op = ops_[r];
    TensorPtr& result = results[r];
    result =
        r < into.size() && into[r] ? into[r] : runtime.make_tensor(op.dtype, shape_, op.spec.name);
    params.out[j] = result->data();
  }
  bind_scalars(runtime, params);
}

void KernelCapture::bind_scalars(Runtime& runtime, FusedParams& params) const {
  std::copy(scalars_.begin(), scalars_.end(), params.s);
  params.error_word = runtime.context.error_word();
  for (const Op& op : ops_) {
    if (op.failure >= 0) {
      params.tokens[op.failure] = runtime.context.error_token(op.spec.name, op.spec.failure);
    }
  }
}

std::vector<TensorPtr> KernelCapture::run(Runtime& runtime, const std::vector<bool>& wanted,
                                          std::span<const TensorPtr> into) {
  std::vector<TensorPtr> results = tail_ && tail_->operand < 0
                                       ? run_tail_over_input(runtime, wanted, into)
                                   : tail_ && wanted[ops_.size()] ? run_with_tail(runtime, wanted)
                                                                  : run_ops(runtime, wanted, into);
  results.resize(this->results());
  return results;
}

std::vector<TensorPtr> KernelCapture::run_with_tail(Runtime& runtime,
                                                    const std::vector<bool>& wanted) {
  const std::vector<std::int32_t> outputs = wanted_ops(wanted);
  FusedTailParams params;
  std::memset(&params, 0, sizeof params);
  const Layout inputs = layout(params.chain);
  if (outputs.size() > kMaxFusedOutputs || inputs == Layout::TooManyDims)
    return run_tail_alone(runtime, wanted);
  const auto dim = static_cast<std::size_t>(tail_->run.dim);
  for (std::size_t k = 0; k < inputs_.size(); ++k)
    params.along[k] = broadcast_strides(*inputs_[k].tensor, shape_)[dim];
  const bool flat = inputs == Layout::Flat;
  if (!compiled_tail_ || compiled_tail_->outputs != outputs || compiled_tail_->load.flat != flat) {
    FusedLoad load;
    load.kernel = kernel_of(outputs);
    load.dtype = tail_->dtype;
    load.flat = flat;
    load.value = load.kernel.value_of_op(static_cast<std::size_t>(tail_->operand));
    load.key = fused_load_key(load);
    compiled_tail_ = CompiledTail{outputs, std::move(load)};
  }
  std::vector<TensorPtr> results(ops_.size());
  bind(runtime, outputs, {}, results, params.chain);
  results.push_back(tail_->run.fused(runtime, compiled_tail_->load, params));
  return results;
}

std::vector<TensorPtr> KernelCapture::run_tail_alone(Runtime& runtime,
                                                     const std::vector<bool>& wanted) {
  const auto operand = static_cast<std::size_t>(tail_->operand);
  std::vector<bool> needed(wanted.begin(),
                           wanted.begin() + static_cast<std::ptrdiff_t>(ops_.size()));
  needed[operand] = true;
  std::vector<TensorPtr> results = run_ops(runtime, needed);
  TensorPtr out = tail_->run.eager(runtime, *results[operand]);
  if (!wanted[operand]) results[operand].reset();
  results.push_back(std::move(out));
  return results;
}

std::vector<TensorPtr> KernelCapture::run_tail_over_input(Runtime& runtime,
                                                          const std::vector<bool>& wanted,
                                                          std::span<const TensorPtr> into) {
  const std::size_t tail = ops_.size();  // the tail's result's index
  std::vector<TensorPtr> results(tail + 1);
  std::vector<std::int32_t> outputs;
  for (std::size_t k = 0; k < tail; ++k) {
    if (wanted[k]) outputs.push_back(static_cast<std::int32_t>(k));
  }
  if (outputs.empty() && !wanted[tail]) return results;
  const CudaTensor& x = *inputs_[static_cast<std::size_t>(-1 - tail_->operand)].tensor;
  // Where one kernel cannot write them all: the tail, then the epilogue's ops one by one.
  const auto apart = [&] {
    results[tail] = tail_->run.eager(runtime, x);
    run_epilogue_one_by_one(runtime, results[tail], wanted, into, results);
    if (!wanted[tail]) results[tail].reset();
    return results;
  };
  if (outputs.empty()) {  // the tail's result alone
    results[tail] = tail_->run.eager(runtime, x);
    return results;
  }
  if (outputs.size() > kMaxFusedOutputs) return apart();
  if (!compiled_epilogue_ || compiled_epilogue_->outputs != outputs) {
    // Input 0 is the tail's result; the capture's inputs the ops read follow, in order.
    CompiledEpilogue c;
    c.outputs = outputs;
    c.kernel.inputs.push_back(tail_->result_dtype);
    std::vector<std::int32_t> slot(inputs_.size(), -1);
    for (const Op& op : ops_) {
      FusedKernelOp f{.op = op.spec, .first_scalar = op.first_scalar, .failure = op.failure};
      for (std::size_t j = 0; j < op.spec.inputs.size(); ++j) {
        const std::int32_t operand = op.operands[j];
        if (operand == kTailResult) {
          f.operands[j] = 0;
        } else if (operand >= 0) {
          f.operands[j] = -1;  // set below, once the inputs are counted
        } else {
          std::int32_t& s = slot[static_cast<std::size_t>(-1 - operand)];
          if (s < 0) {
            s = static_cast<std::int32_t>(c.kernel.inputs.size());
            c.kernel.inputs.push_back(
                inputs_[static_cast<std::size_t>(-1 - operand)].tensor->dtype());
            c.inputs.push_back(-1 - operand);
          }
          f.operands[j] = s;
        }
      }
      c.kernel.ops.push_back(std::move(f));
    }
    for (std::size_t k = 0; k < ops_.size(); ++k) {
      for (std::size_t j = 0; j < ops_[k].spec.inputs.size(); ++j) {
        const std::int32_t operand = ops_[k].operands[j];
        if (operand >= 0 && operand != kTailResult) {
          c.kernel.ops[k].operands[j] = c.kernel.value_of_op(static_cast<std::size_t>(operand));
        }
      }
    }
    for (std::int32_t k : outputs) {
      c.kernel.outputs.push_back({c.kernel.value_of_op(static_cast<std::size_t>(k)),
                                  ops_[static_cast<std::size_t>(k)].dtype});
    }
    c.key = fused_kernel_key(c.kernel);
    compiled_epilogue_ = std::move(c);
  }
  const CompiledEpilogue& c = *compiled_epilogue_;
  TailEpilogue epilogue{.kernel = &c.kernel, .key = &c.key};
  FusedParams& params = epilogue.params;
  const Shape& shape = tail_->shape;
  std::vector<Strides> strides;
  strides.reserve(c.kernel.inputs.size());
  strides.push_back(strided::contiguous_strides(shape));  // the result, as the outputs lie
  for (std::int32_t k : c.inputs) {
    strides.push_back(broadcast_strides(*inputs_[static_cast<std::size_t>(k)].tensor, shape));
  }
  params.n = shape.num_elements();
  params.rank =
      merge_dims(shape, strides, params.sizes, &params.strides[0][0], kMaxFusedDims, kMaxFusedDims);
  if (c.kernel.inputs.size() > kMaxFusedInputs || params.rank < 0) return apart();
  for (std::size_t k = 0; k < c.inputs.size(); ++k) {
    params.in[k + 1] = inputs_[static_cast<std::size_t>(c.inputs[k])].tensor->data();
  }
  for (std::size_t j = 0; j < outputs.size(); ++j) {
    const auto r = static_cast<std::size_t>(outputs[j]);
    results[r] = r < into.size() && into[r]
                     ? into[r]
                     : runtime.make_tensor(ops_[r].dtype, shape, ops_[r].spec.name);
    params.out[j] = results[r]->data();
  }
  bind_scalars(runtime, params);
  TensorPtr result = tail_->run.with_epilogue(runtime, x, epilogue);
  if (wanted[tail]) results[tail] = std::move(result);
  return results;
}

void KernelCapture::run_epilogue_one_by_one(Runtime& runtime, const TensorPtr& result,
                                            const std::vector<bool>& wanted,
                                            std::span<const TensorPtr> into,
                                            std::vector<TensorPtr>& results) {
  std::vector<TensorPtr> values(ops_.size());
  for (std::size_t k = 0; k < ops_.size(); ++k) {
    const Op& op = ops_[k];
    const CudaTensor* inputs[3] = {};
    for (std::size_t j = 0; j < op.spec.inputs.size(); ++j) {
      const std::int32_t operand = op.operands[j];
      inputs[j] = operand == kTailResult ? result.get()
                  : operand >= 0         ? values[static_cast<std::size_t>(operand)].get()
                                         : inputs_[static_cast<std::size_t>(-1 - operand)].tensor;
    }
    values[k] = wanted[k] && k < into.size() && into[k]
                    ? into[k]
                    : runtime.make_tensor(op.dtype, tail_->shape, op.spec.name);
    launch_elementwise(
        runtime, op.spec, *values[k],
        std::span<const CudaTensor* const>(inputs, op.spec.inputs.size()),
        std::span<const std::uint64_t>(scalars_.data() + op.first_scalar, op.spec.scalars.size()));
  }
  for (std::size_t k = 0; k < ops_.size(); ++k) {
    if (wanted[k]) results[k] = std::move(values[k]);
  }
}

std::vector<TensorPtr> KernelCapture::run_ops(Runtime& runtime, const std::vector<bool>& wanted,
                                              std::span<const TensorPtr> into) {
  // A capture run again (a plan's) wants what it wanted before: its kernel and list are kept.
  const bool again = compiled_ && wants_exactly(wanted, compiled_->outputs);
  std::vector<std::int32_t> fresh;
  if (!again) {
    fresh = wanted_ops(wanted);
    if (fresh.empty()) return std::vector<TensorPtr>(ops_.size());
    if (ops_.size() == 1 || fresh.size() > kMaxFusedOutputs) return run_one_by_one(runtime, wanted);
  }

  FusedParams params;
  std::memset(&params, 0, sizeof params);
  const Layout inputs = layout(params);
  if (inputs == Layout::TooManyDims) return run_one_by_one(runtime, wanted);
  if (!again) {
    FusedKernel kernel = kernel_of(fresh);
    std::string key = fused_kernel_key(kernel);
    key += "/ ";  // the layout's letter goes last
    compiled_ = Compiled{std::move(fresh), std::move(kernel), std::move(key), {}};
  }
  const std::vector<std::int32_t>& outputs = compiled_->outputs;
  const FusedKernel& kernel = compiled_->kernel;
  std::vector<TensorPtr> results(ops_.size());
  bind(runtime, outputs, into, results, params);
  const std::int64_t n = params.n;
  if (n == 0) return results;

  // The module of one layout, compiled on its first launch.
  auto function = [&](KernelLayout layout, const char* kernel_name) {
    std::string& key = compiled_->key;
    key.back() = static_cast<char>(layout);
    return runtime.compiler.function(key, kernel_name,
                                     [&] { return fused_kernel_source(kernel, layout); });
  };
  const char* name = ops_.back().spec.name;
  const std::int64_t width = fused_vector_width(kernel);
  if (inputs == Layout::Strided) {
    std::string modes;
    if (std::int64_t rows_width = 0;
        rows_modes(params, kernel, outputs.size(), modes, rows_width)) {
      // The modes and the width (one character: 4 to 16) after the layout's.
      modes += static_cast<char>('a' + rows_width);
      std::string& key = compiled_->rows_key;
      const std::size_t base = compiled_->key.size();
      if (key.size() != base + modes.size() || key.compare(base, std::string::npos, modes) != 0) {
        key = compiled_->key;
        key.back() = 'r';
        key += modes;
      }
      modes.pop_back();
      const CUfunction rows = runtime.compiler.function(
          key, "kiln_fused_rows", [&] { return fused_rows_source(kernel, modes, rows_width); });
      const unsigned threads = vector_shape().threads;
      const auto blocks = static_cast<unsigned>(std::clamp<std::int64_t>(
          (n / rows_width + threads - 1) / threads, 1, std::int64_t{1} << 30));
      runtime.launch(name, rows, blocks, threads, params, 0, nullptr, LaunchOrder::Overlapping);
      return results;
    }
    // Each thread takes fused_strided_run() elements (fused_kernel_source.cpp).
    const std::int64_t run = fused_strided_run();
    runtime.launch(name, function(KernelLayout::Strided, "kiln_fused"),
                   runtime.blocks_for((n + run - 1) / run, 256), 256, params, 0, nullptr,
                   LaunchOrder::Overlapping);
    return results;
  }
  FusedFlatParams p;
  std::memset(&p, 0, sizeof p);
  p.n = n;
  std::copy(std::begin(params.in), std::end(params.in), p.in);
  std::copy(std::begin(params.out), std::end(params.out), p.out);
  std::copy(std::begin(params.s), std::end(params.s), p.s);
  p.error_word = params.error_word;
  std::copy(std::begin(params.tokens), std::end(params.tokens), p.tokens);
  // Every pointer on a whole vector of its dtype: the wide-load kernel.
  bool aligned = n >= width;
  auto on_vector = [&](std::uint64_t pointer, DType dtype) {
    const auto bytes = std::min<std::uint64_t>(16, std::uint64_t(width) * dtype_size(dtype));
    return pointer % bytes == 0;
  };
  for (std::size_t k = 0; k < inputs_.size() && aligned; ++k)
    aligned = on_vector(p.in[k], kernel.inputs[k]);
  for (std::size_t j = 0; j < outputs.size() && aligned; ++j)
    aligned = on_vector(p.out[j], kernel.outputs[j].dtype);
  // What the kernel touches, for a capture that runs independent launches side by side: every
  // input and output is n contiguous elements; the error word is written where an op can fail.
  LaunchFootprint footprint;
  if (Dispatcher::branches()) {
    const auto count = static_cast<std::uint64_t>(n);
    for (std::size_t k = 0; k < inputs_.size(); ++k) {
      footprint.add(p.in[k], count * dtype_size(kernel.inputs[k]), false);
    }
    for (std::size_t j = 0; j < outputs.size(); ++j) {
      footprint.add(p.out[j], count * dtype_size(kernel.outputs[j].dtype), true);
    }
    if (failures_ > 0) footprint.add(p.error_word, sizeof(std::uint32_t), true);
  }
  if (aligned) {
    const unsigned threads = vector_shape().threads;
    const std::int64_t vectors = n / width;
    const auto blocks = static_cast<unsigned>(
        std::clamp<std::int64_t>((vectors + threads - 1) / threads, 1, std::int64_t{1} << 30));
    runtime.launch(name, function(KernelLayout::Wide, "kiln_fused_vec"), blocks, threads, p, 0,
                   &footprint, LaunchOrder::Overlapping);
    return results;
  }
  runtime.launch(name, function(KernelLayout::Flat, "kiln_fused_flat"), runtime.blocks_for(n, 256),
                 256, p, 0, &footprint, LaunchOrder::Overlapping);
  return results;
}

}  // namespace kiln::cuda
