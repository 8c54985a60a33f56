// A fused group on the GPU: runs of elementwise steps become one generated kernel each.
//
// Each elementwise step runs its ordinary op method under a KernelCapture (kernel_capture.h), so
// the kernel holds the same expressions the eager kernels run. A reduction or softmax along a
// dim over a value of the run ends the run as its tail: its own kernels evaluate the chain at
// each element they read. Any other step that does device work ends the run: the captured ops
// whose values are read later are written by one kernel (compiled once per structure, kept by
// the kernel caches), then the step runs eagerly on real tensors, and a new run begins after it.
//
// Capturing costs a call of each op's method per step. A training loop or a model's forward runs
// the same groups again and again, so what a capture decided is kept as a plan, keyed by the
// group's structure with its shapes and strides: which steps ran eagerly, and each run's captured
// ops. A group of the same key whose scalars are the same too runs its plan: the captures run
// again on the group's new tensors, no op method is called. Other scalars capture anew (the
// plan is replaced); a group with random steps (whose place in the stream is a scalar that
// changes at every call) is never planned.
#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <unordered_map>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/env_switch.h"
#include "backends/cuda/host_trace.h"
#include "backends/cuda/kernel_capture.h"
#include "backends/cuda/lib/matmul.h"
#include "contract/fused_program.h"

namespace kiln::cuda {

namespace {

constexpr std::size_t kOpCount = 0
#define KILN_OP(name, ...) +1
#include "kiln/detail/ops.def"
#undef KILN_OP
    ;

// KILN_CUDA_PRODUCT_SUM=1: a product's scale and sum run in its cuBLASLt call. Off
// by default until it has run on a GPU; read at each group that is planned anew (not at replays
// of a plan), so a test can turn it on for its own groups.
bool product_sum_enabled() {
  const char* text = std::getenv("KILN_CUDA_PRODUCT_SUM");
  return text != nullptr && std::strcmp(text, "1") == 0;
}

// Ops that refused a capture once (they do more than elementwise kernels): not tried again.
std::atomic<bool> refused[kOpCount];

// KILN_CUDA_REDUCE_EPILOGUE=1: the backend tells the fusion decorator that it runs a
// reduction's epilogue in the reduction's kernels (fuses_reduction_epilogues), so the decorator
// groups them. Off by default until it has run on a GPU; read once. (A group that holds an
// epilogue runs it so whatever this says: tests hand such groups over with a decorator of their
// own.)
bool reduction_epilogues() {
  static const bool enabled = [] {
    const char* text = std::getenv("KILN_CUDA_REDUCE_EPILOGUE");
    return text != nullptr && std::strcmp(text, "1") == 0;
  }();
  return enabled;
}

bool fusing_enabled() {
  static const bool enabled = on_unless_zero("KILN_CUDA_FUSE");
  return enabled;
}

// What run_fused did with a group, to do again. Runs are in program order: an eager step, or a
// captured run of steps [first, end).
// A product and the steps after it that its cuBLASLt call does as its epilogue: steps
// [head, end); the value added per column (-1: none) and the epilogue.
// Or, with no bias nor activation: a scale and a sum (product_sum_after, fused_program.h).
struct ProductEpilogue {
  std::size_t end = 0;  // 0: none
  std::int32_t bias = -1;
  lib::Epilogue epilogue = lib::Epilogue::None;
  ProductSumSteps sum;  // sum.end > 0: this form
  // The group may write its result over sum.addend (an update in place) and no later step reads
  // the addend's old values: decided by the run that makes the plan (into_leaf_of_steps).
  bool over_addend = false;
};

struct PlanSegment {
  PlanSegment(std::size_t first, std::size_t end) : first(first), end(end) {}
  std::size_t first, end;
  ProductEpilogue product;                 // end > 0: steps [first, end) are this product
  std::unique_ptr<KernelCapture> capture;  // null (and no product): step `first` runs eagerly
  std::vector<std::int32_t> input_values;  // the value each of the capture's inputs is
  std::vector<bool> wanted;                // the capture's results written
  // Per result of the capture: the leaf it is written into (FusedProgram::write_into), or -1;
  // empty: none.
  std::vector<std::int32_t> into_leaves;
  // Per step of the run: the capture's result it is (>= 0), none (kNoValue), or the value
  // -2 - r (an op that returned one of its inputs).
  std::vector<std::int32_t> step_values;
};
constexpr std::int32_t kNoValue = -1;

struct Plan {
  std::vector<std::uint64_t> signature;
  std::vector<Scalar> scalars;  // two per step
  std::vector<std::int32_t> last_use;
  std::vector<PlanSegment> segments;
};

// The words a plan depends on besides scalars: the leaves' dtypes, shapes and strides, every
// step's op, dtype, shape, parameters and wiring, and the outputs. Empty for a group that is
// not planned (random).
// Written into words (cleared first; a caller's buffer, so a lookup allocates nothing).
void signature_of(const FusedProgram& program, std::vector<std::uint64_t>& words) {
  words.clear();
  words.reserve(8 + 12 * (program.leaves.size() + program.steps.size()));
  words.push_back(program.leaves.size());
  for (const Primitive& leaf : program.leaves) {
    if (leaf->dtype() == DType::QFloat) {
      // A quantized weight (a product's leaf) is blocks, not a strided view, whose layout these
      // words cannot say: the group is not planned (random's rule).
      words.clear();
      return;
    }
    const auto& t = static_cast<const CudaTensor&>(*leaf);
    words.push_back(static_cast<std::uint64_t>(t.dtype()) | std::uint64_t(t.rank()) << 8);
    for (std::size_t d = 0; d < t.rank(); ++d) {
      words.push_back(static_cast<std::uint64_t>(t.shape()[d]));
      words.push_back(static_cast<std::uint64_t>(t.strides()[d]));
    }
  }
  for (const FusedStep& step : program.steps) {
    if (step.op == OpCode::random) {
      words.clear();
      return;
    }
    words.push_back(static_cast<std::uint64_t>(step.op) | std::uint64_t(step.dtype) << 16 |
                    std::uint64_t(step.params.dtype) << 24 | std::uint64_t(step.arity) << 32 |
                    std::uint64_t(step.shape.rank()) << 40);
    words.push_back(static_cast<std::uint64_t>(step.params.dim));
    for (std::uint8_t k = 0; k < step.arity; ++k)
      words.push_back(static_cast<std::uint64_t>(step.inputs[k]));
    for (std::size_t d = 0; d < step.shape.rank(); ++d)
      words.push_back(static_cast<std::uint64_t>(step.shape[d]));
  }
  for (std::int32_t out : program.outputs) words.push_back(static_cast<std::uint64_t>(out));
  for (std::size_t k = 0; k < program.write_into.size(); ++k) {
    words.push_back(static_cast<std::uint64_t>(CudaBackend::writable_leaf(program, k)));
  }
}

// The leaf each step's value may be written into (FusedProgram::write_into), or -1; empty when
// none may. (The kernels' vector forms check every output's alignment, as they do for new ones.)
std::vector<std::int32_t> into_leaf_of_steps(const FusedProgram& program) {
  std::vector<std::int32_t> into;
  for (std::size_t k = 0; k < program.write_into.size(); ++k) {
    const std::int32_t leaf = CudaBackend::writable_leaf(program, k);
    if (leaf < 0) continue;
    into.resize(program.steps.size(), -1);
    into[static_cast<std::size_t>(program.outputs[k])] = leaf;
  }
  return into;
}

// The tensors a capture's results are written into, from its segment's into_leaves.
std::vector<TensorPtr> into_tensors(const std::vector<std::int32_t>& into_leaves,
                                    const std::vector<Primitive>& values) {
  std::vector<TensorPtr> into(into_leaves.size());
  for (std::size_t r = 0; r < into.size(); ++r) {
    if (into_leaves[r] >= 0) {
      into[r] =
          std::static_pointer_cast<CudaTensor>(values[static_cast<std::size_t>(into_leaves[r])]);
    }
  }
  return into;
}

std::uint64_t hash_of(const std::vector<std::uint64_t>& words) {
  std::uint64_t h = 0x243f6a8885a308d3ull ^ words.size();
  for (std::uint64_t w : words) {
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 31;
  }
  return h;
}

bool same_scalar(const Scalar& a, const Scalar& b) {
  return a.kind() == b.kind() && a.to_int() == b.to_int() && a.to_uint() == b.to_uint() &&
         std::bit_cast<std::uint64_t>(a.to_double()) == std::bit_cast<std::uint64_t>(b.to_double());
}

bool same_scalars(const Plan& plan, const FusedProgram& program) {
  for (std::size_t i = 0; i < program.steps.size(); ++i) {
    for (std::size_t k = 0; k < 2; ++k) {
      if (!same_scalar(plan.scalars[2 * i + k], program.steps[i].params.scalars[k])) return false;
    }
  }
  return true;
}

// The index of the value that holds tensor among the first `count`, or -1.
std::int32_t value_holding(const std::vector<Primitive>& values, std::size_t count,
                           const TensorPrimitive* tensor) {
  for (std::size_t j = 0; j < count; ++j) {
    if (values[j].get() == tensor) return static_cast<std::int32_t>(j);
  }
  return -1;
}

const Shape& value_shape(const FusedProgram& program, std::int32_t v) {
  const auto leaves = program.leaf_count();
  return v < leaves ? program.leaves[static_cast<std::size_t>(v)]->shape()
                    : program.steps[static_cast<std::size_t>(v - leaves)].shape;
}

// What of the steps after the product at step `head` its cuBLASLt call can do: an add of a value
// per column (a bias: n values, every other dim 1), then relu or gelu, each only where the value
// before it is read by that step alone. A product is linear (its own bias) or a matmul whose
// right operand is a matrix, maybe with leading dims of 1 (x [..., k] @ w [k, n] is linear without
// a bias).
ProductEpilogue epilogue_after(const FusedProgram& program, std::size_t head,
                               std::span<const std::int32_t> last_use) {
  const FusedStep& product = program.steps[head];
  const DType dtype = product.dtype;
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16 && dtype != DType::F64)
    return {};
  if (product.op == OpCode::matmul) {
    // linear's form: w a matrix (leading dims of 1 allowed), x of at least w's rank.
    const Shape& x = value_shape(program, product.inputs[0]);
    const Shape& w = value_shape(program, product.inputs[1]);
    if (x.rank() < w.rank()) return {};
    for (std::size_t d = 0; d + 2 < w.rank(); ++d) {
      if (w[d] != 1) return {};
    }
  }
  const std::int64_t n = product.shape[product.shape.rank() - 1];
  const std::int32_t leaves = program.leaf_count();
  ProductEpilogue e;
  bool bias = product.op == OpCode::linear && product.arity == 3;
  std::int32_t v = leaves + static_cast<std::int32_t>(head);  // the value the epilogue ends with
  std::size_t i = head + 1;
  // Whether step i reads v, and is the only step that does (v is not written out).
  auto reads_only = [&](const FusedStep& step) {
    return last_use[static_cast<std::size_t>(v)] == static_cast<std::int32_t>(i) &&
           (step.inputs[0] == v || (step.arity > 1 && step.inputs[1] == v));
  };
  if (!bias && i < program.steps.size()) {
    const FusedStep& add = program.steps[i];
    if (add.op == OpCode::add && add.dtype == dtype && add.shape == product.shape &&
        add.inputs[0] != add.inputs[1] && reads_only(add)) {
      const std::int32_t other = add.inputs[0] == v ? add.inputs[1] : add.inputs[0];
      const Shape& row = value_shape(program, other);
      if (row.rank() >= 1 && row[row.rank() - 1] == n && row.num_elements() == n) {
        e.bias = other;
        bias = true;
        v = leaves + static_cast<std::int32_t>(i++);
      }
    }
  }
  lib::Epilogue activation = lib::Epilogue::None;
  if (i < program.steps.size()) {
    const FusedStep& act = program.steps[i];
    if ((act.op == OpCode::relu || act.op == OpCode::gelu) && reads_only(act)) {
      activation = act.op == OpCode::relu ? lib::Epilogue::Relu : lib::Epilogue::Gelu;
      ++i;
    }
  }
  if (activation == lib::Epilogue::None && !bias) {
    if (!product_sum_enabled()) return {};
    e.sum = product_sum_after(program, head, last_use);
    e.end = e.sum.end;
    return e;
  }
  if (activation == lib::Epilogue::None && e.bias < 0) return {};
  e.end = i;
  if (activation == lib::Epilogue::Relu) {
    e.epilogue = bias ? lib::Epilogue::BiasRelu : lib::Epilogue::Relu;
  } else if (activation == lib::Epilogue::Gelu) {
    e.epilogue = bias ? lib::Epilogue::BiasGelu : lib::Epilogue::Gelu;
  } else {
    e.epilogue = lib::Epilogue::Bias;
  }
  return e;
}

// Runs the product at step head with its epilogue e into values (the last step's value); false,
// with nothing run, where cuBLASLt cannot take it (the steps then run one by one).
bool run_product(CudaBackend& backend, const FusedProgram& program, std::size_t head,
                 const ProductEpilogue& e, std::span<const std::int32_t> last_use,
                 std::vector<Primitive>& values) {
  const FusedStep& product = program.steps[head];
  const auto value = [&](std::int32_t v) -> Primitive& {
    return values[static_cast<std::size_t>(v)];
  };
  const Primitive* bias = e.bias >= 0 ? &value(e.bias)
                          : product.op == OpCode::linear && product.arity == 3
                              ? &value(product.inputs[2])
                              : nullptr;
  ProductSum sum;
  if (e.sum.end > 0) {
    sum.alpha = e.sum.alpha(program);
    if (e.sum.addend >= 0) {
      sum.addend = &value(e.sum.addend);
      sum.beta = e.sum.beta();
      sum.in_place = e.over_addend;
    }
  }
  Primitive out = backend.linear_epilogue(value(product.inputs[0]), value(product.inputs[1]), bias,
                                          e.epilogue, sum);
  if (out == nullptr) return false;
  const std::size_t leaves = program.leaves.size();
  values[leaves + e.end - 1] = std::move(out);
  // Inputs read last inside the epilogue are not needed any more.
  for (std::size_t v = 0; v < leaves + head; ++v) {
    if (last_use[v] >= static_cast<std::int32_t>(head) &&
        last_use[v] < static_cast<std::int32_t>(e.end)) {
      values[v].reset();
    }
  }
  return true;
}

}  // namespace

// The plans of one GPU's backend. A plan is taken out while it runs, so threads running groups
// of one structure at once never share one (the second captures, as without a plan).
class FusedPlans {
 public:
  std::unique_ptr<Plan> take(std::uint64_t hash, const std::vector<std::uint64_t>& signature) {
    std::lock_guard lock(mutex_);
    const auto found = plans_.find(hash);
    if (found == plans_.end() || found->second == nullptr ||
        found->second->signature != signature) {
      return nullptr;
    }
    return std::move(found->second);
  }
  bool has(std::uint64_t hash) {
    std::lock_guard lock(mutex_);
    return plans_.contains(hash);
  }
  void put(std::uint64_t hash, std::unique_ptr<Plan> plan) {
    std::lock_guard lock(mutex_);
    // Bounded: a program whose groups never repeat (shapes that change every step) starts over
    // rather than growing without end.
    if (plans_.size() >= kMaxPlans && !plans_.contains(hash)) plans_.clear();
    plans_[hash] = std::move(plan);
  }

 private:
  static constexpr std::size_t kMaxPlans = 4096;
  std::mutex mutex_;
  std::unordered_map<std::uint64_t, std::unique_ptr<Plan>> plans_;
};

std::shared_ptr<FusedPlans> make_fused_plans() { return std::make_shared<FusedPlans>(); }

namespace {

// Runs program as plan says (the plan's key and scalars are the program's).
std::vector<Primitive> run_plan(CudaBackend& backend, Plan& plan, const FusedProgram& program) {
  const std::size_t leaves = program.leaves.size();
  std::vector<Primitive> values(program.leaves);
  values.resize(leaves + program.steps.size());
  std::array<const CudaTensor*, kMaxFusedInputs> inputs{};
  for (PlanSegment& segment : plan.segments) {
    if (segment.product.end > 0) {
      if (!run_product(backend, program, segment.first, segment.product, plan.last_use, values)) {
        for (std::size_t s = segment.first; s < segment.end; ++s)
          run_step(backend, program, s, plan.last_use, values);
      }
      continue;
    }
    if (!segment.capture) {
      run_step(backend, program, segment.first, plan.last_use, values);
      continue;
    }
    KernelCapture& capture = *segment.capture;
    for (std::size_t k = 0; k < segment.input_values.size(); ++k) {
      inputs[k] = static_cast<const CudaTensor*>(
          values[static_cast<std::size_t>(segment.input_values[k])].get());
    }
    capture.rebind_inputs(std::span(inputs.data(), segment.input_values.size()));
    // (A run that throws drops the whole plan: run_fused does not put it back.)
    const std::vector<TensorPtr> results =
        capture.run(backend.runtime(), segment.wanted, into_tensors(segment.into_leaves, values));
    capture.rebind_inputs({});
    for (std::size_t s = segment.first; s < segment.end; ++s) {
      const std::int32_t r = segment.step_values[s - segment.first];
      Primitive& value = values[leaves + s];
      if (r >= 0)
        value = results[static_cast<std::size_t>(r)];
      else if (r < kNoValue)
        value = values[static_cast<std::size_t>(-2 - r)];
    }
  }
  std::vector<Primitive> outputs;
  outputs.reserve(program.outputs.size());
  for (std::int32_t out : program.outputs) {
    outputs.push_back(std::move(values[leaves + static_cast<std::size_t>(out)]));
  }
  return outputs;
}

}  // namespace

bool CudaBackend::fuses_reduction_epilogues() const { return reduction_epilogues(); }

std::vector<Primitive> CudaBackend::run_fused(const FusedProgram& program) {
  if (!fusing_enabled()) return run_steps(*this, program);
  // This thread's signature buffer (run_fused is never inside another run_fused on a thread).
  thread_local std::vector<std::uint64_t> signature;
  signature_of(program, signature);
  const std::uint64_t hash = hash_of(signature);
  if (!signature.empty()) {
    if (std::unique_ptr<Plan> plan = plans_->take(hash, signature)) {
      if (same_scalars(*plan, program)) {
        std::vector<Primitive> outputs = run_plan(*this, *plan, program);
        plans_->put(hash, std::move(plan));
        return outputs;
      }
    }
  }
  HostTrace trace("fused group", !host_trace_enabled() ? ""
                                 : signature.empty()   ? "run step by step (no plan)"
                                 : plans_->has(hash) ? "planned again (other scalars or signature)"
                                                     : "planned (a new structure)");
  // A plan made while this group runs; dropped when a step does something it cannot repeat.
  std::unique_ptr<Plan> plan;
  if (!signature.empty()) {
    plan = std::make_unique<Plan>();
    plan->signature = signature;
    for (const FusedStep& step : program.steps) {
      plan->scalars.insert(plan->scalars.end(), step.params.scalars.begin(),
                           step.params.scalars.end());
    }
  }
  const std::vector<std::int32_t> last_use = last_uses(program);
  const std::vector<std::int32_t> into_leaf = into_leaf_of_steps(program);
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
    std::vector<std::int32_t> into_leaves;
    if (!into_leaf.empty()) {
      for (std::size_t s = capture_start; s < next; ++s) {
        const std::int32_t op =
            capture->op_of(static_cast<const CudaTensor*>(values[leaves + s].get()));
        if (op < 0 || into_leaf[s] < 0 || !wanted[static_cast<std::size_t>(op)]) continue;
        into_leaves.resize(wanted.size(), -1);
        into_leaves[static_cast<std::size_t>(op)] = into_leaf[s];
      }
    }
    const std::vector<TensorPtr> results =
        capture->run(runtime_, wanted, into_tensors(into_leaves, values));
    PlanSegment segment(capture_start, next);
    for (std::size_t s = capture_start; s < next; ++s) {
      Primitive& value = values[leaves + s];
      const auto* tensor = static_cast<const CudaTensor*>(value.get());
      if (!capture->is_placeholder(tensor)) {
        const std::int32_t alias = value_holding(values, leaves + s, tensor);
        if (alias < 0) plan.reset();  // a tensor made outside the values: not repeatable
        segment.step_values.push_back(-2 - alias);
        continue;
      }
      const std::int32_t op = capture->op_of(tensor);
      value = op >= 0 ? Primitive(results[static_cast<std::size_t>(op)]) : Primitive();
      segment.step_values.push_back(op >= 0 ? op : kNoValue);
    }
    if (plan && next > capture_start) {
      for (std::size_t k = 0; k < capture->input_count() && plan; ++k) {
        const std::int32_t j = value_holding(values, leaves + capture_start, capture->input(k));
        if (j < 0) plan.reset();
        segment.input_values.push_back(j);
      }
      if (plan) {
        capture->forget_placeholders();
        capture->rebind_inputs({});
        segment.capture = std::move(capture);
        segment.wanted = std::move(wanted);
        segment.into_leaves = std::move(into_leaves);
        plan->segments.push_back(std::move(segment));
      }
    }
    capture.reset();
  };

  // Runs step i under the capture (a new one over shape where none is open); when it cannot be
  // captured, leaves the capture as it was.
  enum class Outcome { Captured, Refused, Full };
  auto try_capture = [&](std::size_t i, const FusedStep& step, const Shape& shape) {
    if (!capture) {
      capture = std::make_unique<KernelCapture>(shape);
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
  // Whether step i is a reduction of a tensor whose result the next step reads elementwise at its
  // shape: then it starts a capture of its own, and the steps after it may be its epilogue.
  auto starts_epilogue = [&](std::size_t i) {
    const FusedStep& step = program.steps[i];
    if (op_info(step.op).group != "reduce" || i + 1 == program.steps.size() ||
        reads_capture(step)) {
      return false;
    }
    const FusedStep& next = program.steps[i + 1];
    const auto v = static_cast<std::int32_t>(leaves + i);
    return next.dim() < 0 && next.shape == step.shape &&
           !refused[static_cast<std::size_t>(next.op)].load(std::memory_order_relaxed) &&
           std::find(next.inputs.begin(), next.inputs.begin() + next.arity, v) !=
               next.inputs.begin() + next.arity;
  };

  for (std::size_t i = 0; i < program.steps.size(); ++i) {
    const FusedStep& step = program.steps[i];
    if (is_head(step.op)) {
      // A product is a library call, never captured; what follows it may be its epilogue.
      close(i);
      ProductEpilogue e = epilogue_after(program, i, last_use);
      e.over_addend =
          e.sum.addend >= 0 && !into_leaf.empty() && into_leaf[e.end - 1] == e.sum.addend &&
          last_use[static_cast<std::size_t>(e.sum.addend)] < static_cast<std::int32_t>(e.end);
      if (e.end > 0 && run_product(*this, program, i, e, last_use, values)) {
        if (plan) plan->segments.emplace_back(i, e.end).product = e;
        i = e.end - 1;
        continue;
      }
      run_step(*this, program, i, last_use, values);
      if (plan) plan->segments.emplace_back(i, i + 1);
      continue;
    }
    const bool tried = !refused[static_cast<std::size_t>(step.op)].load(std::memory_order_relaxed);
    if (tried && step.dim() < 0) {
      if (capture && !(capture->open_shape() == step.shape)) close(i);
      Outcome outcome = try_capture(i, step, step.shape);
      if (outcome == Outcome::Full && !capture->empty()) {  // it may fit a kernel of its own
        close(i);
        outcome = try_capture(i, step, step.shape);
      }
      if (outcome == Outcome::Captured) continue;
    } else if (tried && step.arity == 1 && reads_capture(step)) {
      if (try_capture(i, step, step.shape) == Outcome::Captured) {
        close(i + 1);  // nothing follows a tail over a chain in its kernels
        continue;
      }
    } else if (tried && step.arity == 1 && starts_epilogue(i)) {
      close(i);
      const Shape& over = value_shape(program, step.inputs[0]);
      if (try_capture(i, step, over) == Outcome::Captured) {
        if (!capture->takes_epilogue()) close(i + 1);
        continue;
      }
    }
    close(i);
    run_step(*this, program, i, last_use, values);
    if (plan) plan->segments.emplace_back(i, i + 1);
  }
  close(program.steps.size());

  std::vector<Primitive> outputs;
  outputs.reserve(program.outputs.size());
  for (std::int32_t out : program.outputs) {
    outputs.push_back(std::move(values[leaves + static_cast<std::size_t>(out)]));
  }
  if (plan) {
    plan->last_use = last_use;
    plans_->put(hash, std::move(plan));
  }
  return outputs;
}

}  // namespace kiln::cuda
