#include "decorators/capture/session.h"

#include <limits>

#include "contract/strided_tensor.h"
#include "kiln/detail/format.h"

namespace kiln::capturing {

using kiln::detail::fail;

thread_local int Session::pauses_ = 0;

bool Session::paused_here() noexcept { return pauses_ > 0; }

Session::Scope::Scope(Session& session) {
  if (active_ != nullptr) {
    fail<InvalidArgument>("capture", "a capture of ", active_->device().to_string(),
                          " is already open on this thread; captures do not nest");
  }
  active_ = &session;
  open_count_.fetch_add(1, std::memory_order_relaxed);
}

Session::Scope::~Scope() {
  active_ = nullptr;
  open_count_.fetch_sub(1, std::memory_order_relaxed);
}

void Session::refuse(std::string_view op, std::string_view why) {
  fail<InvalidArgument>(op, "cannot be captured: ", why);
}

void Session::refuse_if_uncapturable(OpCode code) {
  const OpInfo& info = op_info(code);
  if (info.group == "distributed") {
    refuse(info.name,
           "a collective exchanges values with the other ranks of its process group through the "
           "host; call it outside the region");
  }
  if (info.host_transfer) {
    refuse(info.name,
           "it moves values to the host or to another device, which a replay would not do "
           "again; read or move the region's results after capture() or replay()");
  }
  if (info.value_shape) {
    refuse(info.name,
           "the shape of its result depends on the values, which a replay cannot follow; run "
           "it outside the region");
  }
}

ir::TensorId Session::id_of(const Primitive& tensor) {
  auto it = ids_.find(tensor.get());
  if (it != ids_.end() && !it->second.weak.expired()) return it->second.id;
  // First seen: made before the region (or, at this address, after a value the region made
  // died). The recording holds it, so its address is not reused while the recording lives.
  const ir::TensorId id{next_id_++};
  ids_.insert_or_assign(tensor.get(), Entry{id, tensor});
  inputs_.emplace_back(id, tensor);
  return id;
}

ir::TensorId Session::add_output(const Primitive& tensor) {
  const ir::TensorId id{next_id_++};
  ids_.insert_or_assign(tensor.get(), Entry{id, tensor});
  return id;
}

void Session::push(Step step, std::span<const Primitive> outputs) {
  for (const Primitive& output : outputs) {
    step.op.outputs.push_back(add_output(output));
    step.op.output_types.push_back({output->dtype(), output->shape()});
  }
  steps_.push_back(std::move(step));
}

void Session::push_op(ir::Op op, std::span<const Primitive> outputs) {
  Step step;
  step.op = std::move(op);
  push(std::move(step), outputs);
}

Primitive Session::random_input(Backend& inner, Shape shape, Distribution distribution, DType dtype,
                                Device device) {
  Primitive tensor;
  {
    const Pause pause;
    tensor = inner.empty(shape, dtype, device);
  }
  // inner is the hardware backend, which lives as long as the process.
  auto draw = [&inner, tensor, shape, distribution, dtype, device](bool) {
    inner.assign(tensor, inner.random(shape, distribution, dtype, device));
  };
  if (!device_records_) draw(false);  // the region runs now: its numbers are needed now
  add_hook(std::move(draw));
  return tensor;  // numbered when first read: an input of the recording
}

std::vector<Primitive> Session::call_fused(Backend& inner, const FusedProgram& program) {
  for (const FusedStep& s : program.steps) refuse_if_uncapturable(s.op);
  Step step;
  step.kind = Step::Kind::Fused;
  for (const Primitive& leaf : program.leaves) step.op.inputs.push_back(id_of(leaf));
  auto copy = std::make_shared<FusedProgram>(program);
  copy->leaves.clear();
  step.fused = std::move(copy);
  std::vector<Primitive> results = inner.run_fused(program);
  push(std::move(step), results);
  return results;
}

void Session::call_assign(Backend& inner, const Primitive& dst, Primitive src) {
  Step step;
  step.kind = Step::Kind::Assign;
  step.op.inputs = {id_of(dst), id_of(src)};
  inner.assign(dst, std::move(src));
  push(std::move(step));
}

std::shared_ptr<Recording> Session::finish(std::unique_ptr<DeviceGraph> device_graph) {
  auto recording = std::make_shared<Recording>();
  recording->device = hardware_;
  recording->value_count = next_id_;
  recording->device_graph = std::move(device_graph);
  std::vector<bool> is_input(next_id_, false);
  for (const auto& [id, value] : inputs_) is_input[id.index] = true;
  for (const auto& [address, entry] : ids_) {
    if (is_input[entry.id.index] || entry.weak.expired()) continue;
    recording->outputs.emplace_back(entry.id, entry.weak);
  }
  // Each value handed over at its last use (so the hardware may reuse its memory), unless a
  // replay writes it out or reads it again later.
  constexpr std::size_t kNever = std::numeric_limits<std::size_t>::max();
  std::vector<std::size_t> last_use(next_id_, kNever);
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    for (ir::TensorId id : steps_[i].op.inputs) {
      if (id != ir::kNoTensor) last_use[id.index] = i;
    }
  }
  for (const auto& [id, weak] : recording->outputs) last_use[id.index] = kNever - 1;
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    Step& step = steps_[i];
    const std::vector<ir::TensorId>& inputs = step.op.inputs;
    step.take = std::make_unique<bool[]>(inputs.size());  // all false
    step.drop = std::make_unique<bool[]>(step.op.outputs.size());
    for (std::size_t j = 0; j < step.op.outputs.size(); ++j)
      step.drop[j] = last_use[step.op.outputs[j].index] == kNever;
    // assign writes dst, which stays held; src may be handed over (the CPU then moves its
    // storage into dst instead of copying it).
    for (std::size_t k = step.kind == Step::Kind::Assign ? 1 : 0; k < inputs.size(); ++k) {
      const ir::TensorId id = inputs[k];
      if (id == ir::kNoTensor || is_input[id.index] || last_use[id.index] != i) continue;
      bool twice = false;
      for (std::size_t j = 0; j < inputs.size(); ++j) twice = twice || (j != k && inputs[j] == id);
      step.take[k] = !twice;
    }
  }
  recording->hooks = std::move(hooks_);
  recording->inputs = std::move(inputs_);
  recording->steps = std::move(steps_);
  return recording;
}

std::shared_ptr<Recording> record_region(Backend& bottom, const Device& hardware,
                                         detail::FunctionRef<void()> region) {
  Session session(hardware);
  session.set_device_records(bottom.records_device_graph());
  std::unique_ptr<DeviceGraph> device_graph;
  {
    const Session::Scope scope(session);
    bottom.begin_device_capture();
    try {
      region();
    } catch (...) {
      bottom.end_device_capture(false);
      throw;
    }
    device_graph = bottom.end_device_capture(true);
  }
  std::shared_ptr<Recording> recording = session.finish(std::move(device_graph));
  // A device's own recording queued nothing while it recorded: this is the region's one run.
  if (recording->device_graph) {
    for (const auto& hook : recording->hooks) hook(false);
    recording->device_graph->launch();
  }
  return recording;
}

namespace {

// Writes value into held, a value the region made that is still held. A held view that repeats
// elements (expand's stride 0) shows one element along such a dim: that element is written.
void write_output(Backend& backend, const Primitive& held, Primitive value) {
  // A QFloat tensor is blocks, not a strided view (and repeats nothing): written whole.
  if (held->dtype() == DType::QFloat) return backend.assign(held, std::move(value));
  const auto& view = as_strided(held);
  ResolvedSlices slices;
  bool repeats = false;
  for (std::size_t d = 0; d < view.rank(); ++d) {
    const bool here = view.shape()[d] > 1 && view.strides()[d] == 0;
    repeats = repeats || here;
    slices.push_back({0, here ? 1 : view.shape()[d], 1});
  }
  if (!repeats) return backend.assign(held, std::move(value));
  backend.assign(backend.slice(held, slices), backend.slice(std::move(value), slices));
}

}  // namespace

void Recording::replay(Backend& backend) const {
  std::vector<Primitive> values(value_count);
  for (const auto& [id, value] : inputs) values[id.index] = value;
  std::vector<ir::ReadResult> reads;  // stays empty: reads are refused at capture
  for (const Step& step : steps) {
    const std::vector<ir::TensorId>& ids = step.op.inputs;
    switch (step.kind) {
      case Step::Kind::Op:
        ir::replay_unchecked(backend, step.op, values, reads,
                             std::span<const bool>(step.take.get(), ids.size()));
        break;
      case Step::Kind::Fused: {
        FusedProgram program = *step.fused;
        program.leaves.reserve(ids.size());
        for (std::size_t k = 0; k < ids.size(); ++k) {
          Primitive& value = values[ids[k].index];
          program.leaves.push_back(step.take[k] ? std::move(value) : value);
        }
        std::vector<Primitive> results = backend.run_fused(program);
        for (std::size_t j = 0; j < results.size(); ++j)
          values[step.op.outputs[j].index] = std::move(results[j]);
        break;
      }
      case Step::Kind::Assign: {
        Primitive& src = values[ids[1].index];
        backend.assign(values[ids[0].index], step.take[1] ? std::move(src) : src);
        break;
      }
    }
    for (std::size_t k = 0; k < ids.size(); ++k) {
      if (step.take[k]) values[ids[k].index].reset();
    }
    for (std::size_t j = 0; j < step.op.outputs.size(); ++j) {
      if (step.drop[j]) values[step.op.outputs[j].index].reset();
    }
  }
  for (const auto& [id, weak] : outputs) {
    const Primitive held = weak.lock();
    if (held == nullptr || held == values[id.index]) continue;
    write_output(backend, held, values[id.index]);
  }
}

std::string Recording::describe() const {
  std::string out;
  for (const Step& step : steps) {
    switch (step.kind) {
      case Step::Kind::Op:
        out += ir::to_string(step.op);
        break;
      case Step::Kind::Fused:
        out += "fused group of " + std::to_string(step.fused->steps.size()) + " ops over " +
               std::to_string(step.op.inputs.size()) + " leaves";
        break;
      case Step::Kind::Assign:
        out += kiln::detail::concat("assign(%", step.op.inputs[0].index, ", %",
                                    step.op.inputs[1].index, ")");
        break;
    }
    out += '\n';
  }
  return out;
}

}  // namespace kiln::capturing
