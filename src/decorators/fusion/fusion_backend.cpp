// Recording and computing pending values: how a group is chosen and handed to the inner backend.
#include "decorators/fusion/fusion_backend.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>

#include "core/block_pool.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::fusion {
// A group under construction: its steps in order of dependence and the leaves they read.
struct Group {
  FusedProgram program;
  std::vector<LazyNode*> step_nodes;
  std::uint64_t stamp = 0;  // this gather's number: nodes it took carry it

  std::int32_t find_step(const LazyNode* node) const {
    return node->gathered == stamp ? node->step : -1;
  }
  // One leaf per inner tensor, however many nodes show it (a constant of the unfused device
  // gets a node per use).
  std::int32_t leaf(const LazyNode& node) {
    std::vector<Primitive>& leaves = program.leaves;
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      if (leaves[i] == node.value) return static_cast<std::int32_t>(i);
    }
    leaves.push_back(node.value);
    return static_cast<std::int32_t>(leaves.size() - 1);
  }
  // Empty, the vectors' capacity kept (a group per flush would otherwise allocate each time).
  void clear() {
    program.leaves.clear();
    program.steps.clear();
    program.outputs.clear();
    program.write_into.clear();
    program.shape = Shape{};
    step_nodes.clear();
    stamp = 0;
  }
};

namespace {

// The groups of this thread's compute_locked calls, reused: a stack, because gathering a group
// may compute an input of another shape first (a compute_locked inside a compute_locked).
thread_local std::vector<std::unique_ptr<Group>> t_groups;
thread_local std::size_t t_groups_in_use = 0;

// A group of the stack for one compute_locked call, emptied when it ends (its leaves released).
class GroupLease {
 public:
  GroupLease() {
    if (t_groups_in_use == t_groups.size()) t_groups.push_back(std::make_unique<Group>());
    group_ = t_groups[t_groups_in_use++].get();
  }
  ~GroupLease() {
    group_->clear();
    --t_groups_in_use;
  }
  GroupLease(const GroupLease&) = delete;
  GroupLease& operator=(const GroupLease&) = delete;
  Group& operator*() const noexcept { return *group_; }

 private:
  Group* group_;
};

// A computed node holding inner, the inner backend's tensor.
NodeRef computed_node(Primitive inner) {
  auto node = std::allocate_shared<LazyNode>(PoolAllocator<LazyNode>{});
  node->dtype = inner->dtype();
  node->shape = inner->shape();
  node->value = std::move(inner);
  node->done.store(true, std::memory_order_relaxed);
  return node;
}

}  // namespace

std::shared_ptr<FusionPassthrough> make_fusion_backend(std::shared_ptr<Backend> inner) {
  return std::make_shared<FusionBackend>(std::move(inner));
}

NodeRef FusionPassthrough::node_of(const Primitive& p) const {
  if (!p->device().is_fused()) return computed_node(p);  // the unfused device's, a constant
  const auto& tensor = static_cast<const FusionTensor&>(*p);
  NodeRef& node = tensor.node();
  if (node == nullptr) node = computed_node(tensor.value());
  return node;
}

Primitive FusionPassthrough::wrap_computed(Primitive inner) const {
  return std::allocate_shared<FusionTensor>(PoolAllocator<FusionTensor>{}, std::move(inner),
                                            device_);
}

Primitive FusionPassthrough::computed(const Primitive& p) {
  if (!p->device().is_fused()) return p;
  const auto& tensor = static_cast<const FusionTensor&>(*p);
  if (const Primitive* value = tensor.known_value()) return *value;
  std::lock_guard lock(mutex_);
  return computed_locked(p);
}

Primitive FusionPassthrough::computed_locked(const Primitive& p) {
  if (!p->device().is_fused()) return p;
  const auto& tensor = static_cast<const FusionTensor&>(*p);
  if (const Primitive* value = tensor.known_value()) return *value;
  compute_locked(tensor.node());
  return tensor.node()->value;
}

Primitive FusionPassthrough::run_now(std::int64_t space, RecordInputs& inputs,
                                     const StepParams& params, const Shape& shape, StepRun run) {
  // Small work over computed inputs runs now: a group this small would run its ops one by one
  // anyway, and recording them would only add the cost of the record.
  if (space >= min_fused_) return nullptr;
  std::array<Primitive, 3> values;
  for (std::uint8_t k = 0; k < inputs.count; ++k) {
    Primitive& p = inputs.items[k];
    if (!p->device().is_fused()) {
      values[k] = p;
      continue;
    }
    const Primitive* value = static_cast<const FusionTensor&>(*p).known_value();
    if (value == nullptr) return nullptr;
    values[k] = *value;
  }
  // The decorator's handles go first: an inner tensor only this op holds may be reused in place.
  for (std::uint8_t k = 0; k < inputs.count; ++k) inputs.items[k].reset();
  return wrap_computed(
      run(inner(), std::span<Primitive>(values.data(), inputs.count), params, shape));
}

Primitive FusionPassthrough::record(OpCode op, DType dtype, Shape shape, const StepParams& params,
                                    RecordInputs inputs, StepRun run) {
  const std::int64_t space =
      params.dim >= 0 ? inputs.items[0]->shape().num_elements() : shape.num_elements();
  if (Primitive now = run_now(space, inputs, params, shape, run)) return now;
  auto node = std::allocate_shared<LazyNode>(PoolAllocator<LazyNode>{});
  node->dtype = dtype;
  node->shape = std::move(shape);
  node->op = op;
  node->params = params;
  node->run = run;
  node->arity = inputs.count;
  std::lock_guard lock(mutex_);
  std::uint32_t pending = 1;
  for (std::uint8_t k = 0; k < node->arity; ++k) {
    node->inputs[k] = node_of(inputs.items[k]);
    if (!node->inputs[k]->computed()) pending += node->inputs[k]->pending_ops;
  }
  if (pending > kMaxGroupOps) {
    for (std::uint8_t k = 0; k < node->arity; ++k) compute_locked(node->inputs[k]);
    pending = 1;
  }
  node->pending_ops = pending;
  // Queued after the purge: until its handle is made below, this node has none and would be
  // forgotten, and a flush (at the end of a captured region) would then miss it.
  if (queued_.size() + 1 >= purge_at_) {
    // Forget what was computed or dropped; if as many held values still wait, compute them.
    std::erase_if(queued_, [](const std::weak_ptr<LazyNode>& weak) {
      if (weak.expired()) return true;  // most are: a plain load, no lock of the count
      const NodeRef n = weak.lock();
      return n == nullptr || n->computed() || n->handles.load(std::memory_order_relaxed) == 0;
    });
    if (queued_.size() > kMaxQueued) flush_locked();
    purge_at_ = std::max(kPurgeAt, 2 * (queued_.size() + 1));
  }
  queued_.emplace_back(node);
  return std::allocate_shared<FusionTensor>(PoolAllocator<FusionTensor>{}, std::move(node),
                                            device_);
}

Shape FusionPassthrough::group_space(const LazyNode& target, Shape& epilogue) const {
  epilogue = Shape{};
  if (!reduction_epilogues_ || target.params.dim >= 0) return target.space();
  // Depth-first over the pending elementwise nodes of target's shape that target reads; the
  // first pending reduction whose result has that shape gives the space. (Bounded: a group holds
  // at most kMaxGroupOps pending nodes.)
  std::array<const LazyNode*, kMaxGroupOps> stack{};
  std::size_t depth = 0, visited = 0;
  stack[depth++] = &target;
  while (depth > 0 && visited++ < kMaxGroupOps) {
    const LazyNode* node = stack[--depth];
    for (std::uint8_t k = 0; k < node->arity; ++k) {
      const LazyNode* in = node->inputs[k].get();
      if (in->computed() || in->shape != target.shape) continue;
      if (in->params.dim >= 0) {
        if (op_info(in->op).group == "reduce" && in->space() != target.shape) {
          epilogue = target.shape;
          return in->space();
        }
      } else if (in->op != OpCode::random && depth < stack.size()) {
        stack[depth++] = in;
      }
    }
  }
  return target.space();
}

bool FusionPassthrough::gather(Group& group, const NodeRef& target, const Shape& space,
                               const Shape& epilogue) {
  group.clear();
  group.stamp = ++gathers_;
  group.program.shape = space;
  // pending_ops bounds the steps (shared inputs count twice), so the vectors grow once.
  group.program.steps.reserve(target->pending_ops);
  group.step_nodes.reserve(target->pending_ops);
  // Depth-first, inputs before the node: an input joins the group when it is pending and
  // iterates over the same shape; a pending input over another shape (a broadcast operand made
  // lazily) is computed first, as its own group, and read as a leaf. While the leaves are not
  // all known, a step is referred to as -1 - its index.
  auto add = [&](auto& self, LazyNode* node) -> std::int32_t {
    if (node->computed()) return group.leaf(*node);
    const std::int32_t found = group.find_step(node);
    if (found >= 0) return -1 - found;
    FusedStep step;
    step.op = node->op;
    step.dtype = node->dtype;
    step.shape = node->shape;
    step.params = node->params;
    step.arity = node->arity;
    std::array<std::int32_t, 3> inputs{};
    for (std::uint8_t k = 0; k < node->arity; ++k) {
      LazyNode* in = node->inputs[k].get();
      // A reduction's epilogue: elementwise ops over results of the reduced shape (not random,
      // whose values are drawn at positions of its own shape).
      const bool joins_epilogue = epilogue.rank() > 0 && in->params.dim < 0 &&
                                  in->op != OpCode::random && in->shape == epilogue;
      if (!in->computed() && in->space() != space && !joins_epilogue)
        compute_locked(node->inputs[k]);
      inputs[k] = self(self, in);
    }
    step.inputs = inputs;
    step.run = node->run;
    group.program.steps.push_back(std::move(step));
    node->gathered = group.stamp;
    node->step = static_cast<std::int32_t>(group.step_nodes.size());
    group.step_nodes.push_back(node);
    return -static_cast<std::int32_t>(group.step_nodes.size());
  };
  add(add, target.get());
  for (const LazyNode* node : group.step_nodes) {
    if (node->computed()) return false;
  }
  const std::int32_t leaves = group.program.leaf_count();
  for (FusedStep& step : group.program.steps) {
    for (std::uint8_t k = 0; k < step.arity; ++k) {
      if (step.inputs[k] < 0) step.inputs[k] = leaves - 1 - step.inputs[k];
    }
  }
  return true;
}

namespace {

// Offers the backend to write output k of program into `into` (FusedProgram::write_into) where
// the group allows it: only float steps (an integer op that fails, division by zero, makes a
// backend run the group again step by step, which would read the leaf written), and either
// output k iterates over the whole space and no step works along a dim (a reduction's kernels
// may read an element after an elementwise kernel of the same launch wrote it), or output k is of
// a reduction's epilogue and only epilogue steps read into's values, directly or not (each reads
// an element just before the element is written). (A product runs whole before the steps after
// it: it has read its inputs before anything is written.) The backend checks the memory (into
// dense, other leaves on its storage the same view).
void offer_write_into(FusedProgram& program, std::size_t k, const Primitive& into) {
  const FusedStep& out = program.steps[static_cast<std::size_t>(program.outputs[k])];
  if (out.dtype != into->dtype() || out.shape != into->shape()) return;
  const bool epilogue = out.shape != program.shape;
  for (const FusedStep& step : program.steps) {
    if ((step.dim() >= 0 && !epilogue) || !is_float(step.dtype)) return;
  }
  std::vector<Primitive>& leaves = program.leaves;
  auto leaf = std::find(leaves.begin(), leaves.end(), into);
  if (epilogue && leaf != leaves.end()) {
    // The values that depend on into's: every step that computes one is an epilogue step.
    std::vector<bool> reads_into(leaves.size() + program.steps.size(), false);
    reads_into[static_cast<std::size_t>(leaf - leaves.begin())] = true;
    for (std::size_t i = 0; i < program.steps.size(); ++i) {
      const FusedStep& step = program.steps[i];
      bool reads = false;
      for (std::uint8_t j = 0; j < step.arity; ++j)
        reads = reads || reads_into[static_cast<std::size_t>(step.inputs[j])];
      if (!reads) continue;
      if (step.dim() >= 0 || step.shape != out.shape) return;
      reads_into[leaves.size() + i] = true;
    }
  }
  if (leaf == leaves.end()) {
    leaves.push_back(into);
    leaf = leaves.end() - 1;
    // Steps refer to later values by index: each index past the leaves moves up by one.
    const auto count = static_cast<std::int32_t>(leaves.size()) - 1;
    for (FusedStep& step : program.steps) {
      for (std::uint8_t j = 0; j < step.arity; ++j) {
        if (step.inputs[j] >= count) ++step.inputs[j];
      }
    }
  }
  program.write_into.assign(program.outputs.size(), -1);
  program.write_into[k] = static_cast<std::int32_t>(leaf - leaves.begin());
}

}  // namespace

bool FusionPassthrough::compute_locked(const NodeRef& target, const Primitive& into) {
  if (target->computed()) return false;
  const GroupLease lease;
  Group& group = *lease;
  // Computing an input outside the group may compute steps already taken into it (a node of
  // this space that the outside input depends on): then the group is gathered again, over the
  // space target then has (its reduction may have run).
  Shape epilogue;
  for (;;) {
    const Shape space = group_space(*target, epilogue);
    if (gather(group, target, space, epilogue)) break;
    if (target->computed()) return false;
  }
  // The values to write: the target, and every other step a user still holds.
  const auto steps = static_cast<std::int32_t>(group.step_nodes.size());
  std::size_t target_output = 0;
  for (std::int32_t i = 0; i < steps; ++i) {
    const LazyNode* node = group.step_nodes[static_cast<std::size_t>(i)];
    if (node == target.get() || node->handles.load(std::memory_order_relaxed) > 0) {
      if (node == target.get()) target_output = group.program.outputs.size();
      group.program.outputs.push_back(i);
    }
  }
  // Groups outside the controls' choice run step by step: how fusion-bisect tells which fused
  // group changes a program's output.
  const std::uint64_t number = take_group_number();
  const bool fused = controls_.runs_fused(number);
  // (Not under the checker, whose step-by-step run reads the leaves after the fused one.)
  if (into != nullptr && fused && !check()) {
    offer_write_into(group.program, target_output, into);
  }
  if (controls_.describes(number)) {
    std::fputs(describe_group(number, fused, group.program).c_str(), stderr);
  }
  std::vector<Primitive> values;
  try {
    values = fused ? inner().run_fused(group.program) : run_steps(inner(), group.program);
  } catch (const OutOfMemory&) {
    throw;
  } catch (const Error& error) {
    // An op of the group failed (integer division by zero, an index out of range): the failure
    // comes at the read, so say which group it came from; the op's own message names the op.
    detail::fail<ExecutionError>("fusion",
                                 "a recorded op failed when its group ran: ", error.what(),
                                 "; the group:\n", describe(group.program));
  }
  if (fused) {
    if (controls_.fault == number) inject_fault_for_tests(inner(), values);
    if (result_hook_) result_hook_(group.program, values);
    if (check()) check_group(group.program, values);
  }
  groups_run_.fetch_add(1, std::memory_order_relaxed);
  for (std::size_t k = 0; k < values.size(); ++k) {
    LazyNode* node = group.step_nodes[static_cast<std::size_t>(group.program.outputs[k])];
    // A node can appear twice when a gather inside this one took it (and so re-marked it) as an
    // intermediate; its value is written once, as readers without the lock rely on.
    if (node->computed()) continue;
    if (values[k]->dtype() != node->dtype || values[k]->shape() != node->shape) {
      // The dtype and shape users saw at the call must be what ran: a recording rule is wrong.
      detail::fail<ExecutionError>(op_info(node->op).name, "recorded as ", dtype_name(node->dtype),
                                   " ", node->shape.to_string(), " but computed ",
                                   dtype_name(values[k]->dtype()), " ",
                                   values[k]->shape().to_string());
    }
    node->value = std::move(values[k]);
    node->done.store(true, std::memory_order_release);
    node->run = nullptr;
    for (auto& in : node->inputs) in.reset();
    node->arity = 0;
    node->pending_ops = 0;
  }
  return into != nullptr && target->value == into;
}

bool FusionPassthrough::check_from_environment() noexcept {
  const char* value = std::getenv("KILN_FUSION_CHECK");
  return value != nullptr && *value != '\0' && std::string_view(value) != "0";
}

namespace {

// How far a fused value may be from the step-by-step one: the same kernels run on pieces, so
// only a reduction split differently or a vector math path taken on a piece rounds otherwise.
double tolerance(DType dtype) {
  switch (dtype) {
    case DType::F64:
      return 1e-12;
    case DType::F32:
      return 1e-5;
    case DType::F16:
    case DType::BF16:
      return 1e-2;
    default:
      return 0;  // integers and bools: exact
  }
}

bool same_value(double fused, double reference, double tol) {
  if (std::isnan(fused) || std::isnan(reference)) return std::isnan(fused) && std::isnan(reference);
  if (fused == reference) return true;
  return std::abs(fused - reference) <= tol * std::max(1.0, std::abs(reference));
}

}  // namespace

void FusionPassthrough::check_group(const FusedProgram& program,
                                    const std::vector<Primitive>& fused) {
  const std::vector<Primitive> reference = run_steps(inner(), program);
  for (std::size_t k = 0; k < fused.size(); ++k) {
    const FusedStep& step = program.steps[static_cast<std::size_t>(program.outputs[k])];
    // (Appended piece by piece: GCC 12 warns falsely on "literal" + std::to_string(...).)
    std::string label = "v";
    label.append(std::to_string(program.leaf_count() + program.outputs[k]))
        .append(" (")
        .append(op_info(step.op).name)
        .append(")");
    if (fused[k]->shape() != reference[k]->shape() || fused[k]->dtype() != reference[k]->dtype()) {
      detail::fail<FusionMismatch>(
          "fusion", label, " is ", dtype_name(fused[k]->dtype()), " ",
          fused[k]->shape().to_string(), " fused but ", dtype_name(reference[k]->dtype()), " ",
          reference[k]->shape().to_string(), " op by op; the group:\n", describe(program));
    }
    const std::vector<double> got = inner().into_data(fused[k]).get().to_f64_vec();
    const std::vector<double> want = inner().into_data(reference[k]).get().to_f64_vec();
    const double tol = tolerance(step.dtype);
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (!same_value(got[i], want[i], tol)) {
        detail::fail<FusionMismatch>("fusion", label, " differs at element ", i, ": fused ", got[i],
                                     ", op by op ", want[i], "; the group:\n", describe(program));
      }
    }
  }
}

void FusionPassthrough::flush_locked(std::span<const LazyNode* const> skip) {
  std::vector<std::weak_ptr<LazyNode>> queued;
  queued.swap(queued_);
  for (const std::weak_ptr<LazyNode>& weak : queued) {
    const NodeRef node = weak.lock();
    if (node == nullptr || node->handles.load(std::memory_order_relaxed) == 0) continue;
    if (std::find(skip.begin(), skip.end(), node.get()) != skip.end()) {
      queued_.push_back(weak);  // still pending: kept for the next flush
      continue;
    }
    compute_locked(node);
  }
}

void FusionPassthrough::flush() {
  {
    std::lock_guard lock(mutex_);
    flush_locked();
  }
  inner().flush();
}

void FusionPassthrough::assign(const Primitive& dst, Primitive src) {
  std::unique_lock lock(mutex_);
  // A pending src that no other handle shows (an optimizer's update, moved in) is not written
  // anywhere but dst: its group writes there directly, sparing new memory and a copy (on the GPU,
  // an allocation and a copy kernel per parameter and step).
  NodeRef direct;
  if (src->device().is_fused() && src.use_count() == 1) {
    const auto& tensor = static_cast<const FusionTensor&>(*src);
    if (tensor.known_value() == nullptr && tensor.node()->handles.load() == 1) {
      direct = tensor.node();
    }
  }
  // Pending ops may read dst's old values: every held one runs first, but for src's own pending
  // inputs (temporaries of the expression still alive), which src's group writes as it reads the
  // old values.
  std::vector<const LazyNode*> own;
  if (direct) {
    own.push_back(direct.get());
    for (std::size_t i = 0; i < own.size() && own.size() <= kMaxGroupOps; ++i) {
      const LazyNode* node = own[i];
      for (std::uint8_t k = 0; k < node->arity; ++k) {
        const LazyNode* in = node->inputs[k].get();
        if (!in->computed() && std::find(own.begin(), own.end(), in) == own.end()) {
          own.push_back(in);
        }
      }
    }
  }
  flush_locked(own);
  Primitive target = computed_locked(dst);
  if (direct && compute_locked(direct, target)) return;
  if (direct) flush_locked();  // what was skipped and src's group did not compute
  Primitive value = computed_locked(src);
  lock.unlock();
  src.reset();
  inner().assign(target, std::move(value));
}

void FusionPassthrough::sync() {
  {
    std::lock_guard lock(mutex_);
    flush_locked();
  }
  inner().sync();
}

}  // namespace kiln::fusion
