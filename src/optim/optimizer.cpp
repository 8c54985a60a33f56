// The optimizer's walk over a module and its per-parameter state (the update rules live in one
// file per algorithm).
#include "kiln/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <utility>

#include "kiln/detail/format.h"
#include "kiln/graph.h"

namespace kiln::optim {

using kiln::detail::fail;

Primitive ParamState::take(std::string_view name) {
  auto it = buffers.find(name);
  if (it == buffers.end()) return nullptr;
  Primitive value = std::move(it->second);
  buffers.erase(it);
  return value;
}

Primitive ParamState::take_or_zeros(std::string_view name, const Primitive& like) {
  if (Primitive value = take(name)) return value;
  return kiln::detail::full(like->shape(), 0, like->dtype(), like->device(), Kind::Float);
}

void ParamState::put(std::string_view name, Primitive value) {
  buffers.insert_or_assign(std::string(name), std::move(value));
}

namespace {

struct NamedSlot {
  std::string name;
  nn::ParamSlot* slot;
};

class CollectTrainable final : public nn::Visitor {
 public:
  void visit(const std::string& name, nn::ParamSlot& slot) override {
    if (slot.trainable()) out.push_back({name, &slot});
  }
  std::vector<NamedSlot> out;
};

// Refuses state made for another parameter under the same name, rather than letting the update
// broadcast it (a [4, 1] buffer and a [1, 4] parameter would make a [4, 4] parameter).
void check_state_fits(const ParamState& state, const Primitive& param, std::string_view name,
                      std::string_view op) {
  const auto refuse = [&](std::string_view what, const auto& now, const auto& then,
                          std::string_view remedy) {
    fail<InvalidArgument>(op, "parameter '", name, "' ", what, " ", now,
                          " but the optimizer's state for it was made for ", then,
                          " (another model, or a parameter changed since its last step); ", remedy);
  };
  constexpr std::string_view kReset = "reset() the optimizer to start afresh";
  if (param->shape() != state.shape) {
    refuse("has shape", param->shape().to_string(), state.shape.to_string(), kReset);
  }
  constexpr std::string_view kCarry =
      "load_state_dict(module, state_dict()) carries the state over to a module cast or moved "
      "since, reset() starts afresh";
  if (param->dtype() != state.dtype) {
    refuse("is", dtype_name(param->dtype()), dtype_name(state.dtype), kCarry);
  }
  if (param->device() != state.device) {
    refuse("is on", param->device().to_string(), state.device.to_string(), kCarry);
  }
}

// A captured step reads the state a replay will find: it must exist before the capture (the
// first step makes it, with other arithmetic than the later ones).
void check_capturable_state(const ParamState* state, const std::vector<std::string>& buffers,
                            std::string_view name, std::string_view op) {
  for (const std::string& buffer : buffers) {
    if (state == nullptr || state->buffers.find(buffer) == state->buffers.end()) {
      fail<InvalidArgument>(op, "cannot be captured before parameter '", name, "' has its state ('",
                            buffer, "'): its first step makes it; run one step before capture()");
    }
  }
}

void record_owner(ParamState& state, const Primitive& param) {
  state.shape = param->shape();
  state.dtype = param->dtype();
  state.device = param->device().without_autodiff();
}

}  // namespace

std::size_t Optimizer::step_module(void* module, nn::detail::VisitFn visit, const Gradients& grads,
                                   double lr, std::function<double(std::int64_t)> lr_at) {
  const std::string op = kiln::detail::concat(name(), "::step");
  if (!(lr >= 0) || !std::isfinite(lr)) {
    fail<InvalidArgument>(op, "learning rate ", lr, " must be a finite number >= 0");
  }
  // Under a capture (kiln/graph.h) parameters and state are written in place: a replay reads
  // and writes the same tensors, so a replayed step trains.
  const bool in_capture = capture_open();
  if (in_capture) {
    if (const std::string_view why = capture_refusal(); !why.empty())
      fail<InvalidArgument>(op, "cannot be captured: ", why);
  }
  CollectTrainable collect;
  visit(module, collect);
  const std::vector<NamedSlot>& slots = collect.out;

  // Every check first, so a refused step changes no parameter and no state. A parameter shared by
  // several slots (tied weights) is updated once, under its first name; `tied` lists for each
  // slot the later slots that share its parameter.
  struct Pending {
    std::size_t slot;
    Primitive grad;  // plain, in the parameter's dtype
  };
  std::vector<Pending> pending;
  std::vector<std::vector<std::size_t>> tied(slots.size());
  std::map<const TensorPrimitive*, std::size_t> first_slot;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const nn::ParamSlot& slot = *slots[i].slot;
    const auto [it, first] = first_slot.try_emplace(slot.primitive().get(), i);
    if (!first) {
      tied[it->second].push_back(i);
      continue;
    }
    const std::optional<Primitive> tracked_grad = kiln::detail::grad(slot.primitive(), grads);
    if (!tracked_grad) continue;
    const Primitive param = kiln::detail::inner(slot.primitive());
    Primitive grad = kiln::detail::inner(*tracked_grad);
    if (grad->shape() != param->shape()) {
      fail<ShapeMismatch>(op, "the gradient of '", slots[i].name, "' has shape ",
                          grad->shape().to_string(), " but the parameter has shape ",
                          param->shape().to_string());
    }
    if (const ParamState* existing = state(slots[i].name)) {
      check_state_fits(*existing, param, slots[i].name, op);
    }
    if (in_capture) check_capturable_state(state(slots[i].name), buffer_names(), slots[i].name, op);
    if (grad->dtype() != param->dtype()) grad = kiln::detail::cast(std::move(grad), param->dtype());
    pending.push_back({i, std::move(grad)});
  }

  // Under a capture the values that change between steps come from tensors each replay
  // refreshes (replay_values); in an eager step they are host numbers.
  std::vector<std::vector<Primitive>> device_values;
  // A captured graph reads the parameters and state it was captured over: while one lives, an
  // eager step writes in place too, so the graph and the module keep seeing the same tensors.
  const bool in_place = in_capture || graphs_alive() > 0;
  if (in_capture) {
    for (Pending& p : pending) {
      ParamState& state = states_.try_emplace(slots[p.slot].name).first->second;
      record_owner(state, kiln::detail::inner(slots[p.slot].slot->primitive()));
      ++state.step;
    }
    // One tensor per device and dtype of the parameters, holding each one's values in turn.
    const std::size_t count = step_values(lr, 1).size();
    std::map<std::pair<std::string, DType>, std::vector<std::size_t>> groups;
    for (std::size_t n = 0; n < pending.size(); ++n) {
      const Primitive param = kiln::detail::inner(slots[pending[n].slot].slot->primitive());
      groups[{param->device().to_string(), param->dtype()}].push_back(n);
    }
    std::vector<std::string> names;
    for (const Pending& p : pending) names.push_back(slots[p.slot].name);
    // The learning rate of the step a replay makes, shared by the groups' hooks: the first one
    // advances the counts, as step() does.
    auto replay_lr = std::make_shared<double>(lr);
    device_values.resize(pending.size());
    bool first = true;
    for (const auto& [key, members] : groups) {
      std::vector<std::string> member_names;
      for (std::size_t n : members) member_names.push_back(names[n]);
      auto values = [this, lr, lr_at, replay_lr, first, names, member_names](bool replay) {
        if (replay && first) {
          *replay_lr = lr_at ? lr_at(steps_) : lr;
          ++steps_;
          for (const std::string& n : names) ++states_.at(n).step;
        }
        std::vector<double> out;
        for (const std::string& n : member_names) {
          const std::vector<double> v = step_values(replay ? *replay_lr : lr, states_.at(n).step);
          out.insert(out.end(), v.begin(), v.end());
        }
        return out;
      };
      first = false;
      const Primitive param =
          kiln::detail::inner(slots[pending[members.front()].slot].slot->primitive());
      const Primitive table = kiln::detail::capture_host_values(
          param->device(), param->dtype(), static_cast<std::int64_t>(members.size() * count),
          std::move(values));
      for (std::size_t m = 0; m < members.size(); ++m) {
        for (std::size_t j = 0; j < count; ++j) {
          const auto at = static_cast<std::int64_t>(m * count + j);
          device_values[members[m]].push_back(kiln::detail::slice(table, {Slice(at, at + 1)}));
        }
      }
    }
  }
  for (std::size_t n = 0; n < pending.size(); ++n) {
    Pending& p = pending[n];
    const NamedSlot& target = slots[p.slot];
    Primitive param = kiln::detail::inner(target.slot->primitive());
    const auto it = states_.try_emplace(target.name).first;
    ParamState& state = it->second;
    if (!in_capture) {
      record_owner(state, param);
      ++state.step;
    }
    try {
      if (in_place) {
        const std::map<std::string, Primitive, std::less<>> before = state.buffers;
        const StepValues values =
            in_capture ? StepValues(step_values(lr, state.step), std::move(device_values[n]))
                       : StepValues(step_values(lr, state.step));
        Primitive next = update(param, std::move(p.grad), values, state);
        kiln::detail::assign(param, std::move(next));
        for (const auto& [buffer_name, old] : before) {
          Primitive now = state.take(buffer_name);
          if (now != nullptr && now != old) kiln::detail::assign(old, std::move(now));
          state.put(buffer_name, old);
        }
      } else {
        Primitive next = update(std::move(param), std::move(p.grad),
                                StepValues(step_values(lr, state.step)), state);
        // Checked as any new value (the update keeps shape, dtype and device; this guards it).
        target.slot->assign(
            kiln::detail::require_grad(kiln::detail::from_inner(std::move(next)), true),
            target.name);
      }
    } catch (...) {
      // Buffers may have been moved out mid-update: start this parameter afresh next time.
      states_.erase(it);
      throw;
    }
    for (std::size_t other : tied[p.slot])
      slots[other].slot->set_primitive(target.slot->primitive());
  }
  ++steps_;
  return pending.size();
}

namespace {

// value (one element) with x's rank, to broadcast against it.
Primitive as_rank_of(const Primitive& value, const Primitive& x) {
  const std::size_t rank = x->rank();
  return kiln::detail::reshape(value, Shape(std::vector<std::int64_t>(rank, 1)), rank);
}

}  // namespace

Primitive StepValues::mul(Primitive x, std::size_t i) const {
  if (device_.empty()) return kiln::detail::mul_scalar(std::move(x), host_.at(i));
  Primitive value = as_rank_of(device_.at(i), x);
  return kiln::detail::mul(std::move(x), std::move(value));
}

Primitive StepValues::div(Primitive x, std::size_t i) const {
  if (device_.empty()) return kiln::detail::div_scalar(std::move(x), host_.at(i));
  Primitive value = as_rank_of(device_.at(i), x);
  return kiln::detail::div(std::move(x), std::move(value));
}

const ParamState* Optimizer::state(std::string_view param_name) const {
  auto it = states_.find(param_name);
  return it == states_.end() ? nullptr : &it->second;
}

std::vector<std::string> Optimizer::state_names() const {
  std::vector<std::string> names;
  names.reserve(states_.size());
  for (const auto& [param_name, state] : states_) names.push_back(param_name);
  return names;
}

void Optimizer::reset() noexcept {
  states_.clear();
  steps_ = 0;
}

namespace {

TensorData count_data(std::int64_t count) {
  return TensorData::from_vec(std::vector<std::int64_t>{count});
}

std::int64_t read_count(const TensorData& data, const std::string& key, const std::string& op) {
  if (data.dtype() != DType::I64) {
    fail<DTypeMismatch>(op, "entry '", key, "' is a count and must be i64, got ",
                        dtype_name(data.dtype()));
  }
  if (data.shape() != Shape{1}) {
    fail<ShapeMismatch>(op, "entry '", key, "' is a count and must have shape [1], got ",
                        data.shape().to_string());
  }
  const std::int64_t count = data.as_span<std::int64_t>()[0];
  if (count < 0) fail<InvalidArgument>(op, "entry '", key, "' is a count but holds ", count);
  return count;
}

std::string list(const std::vector<std::string>& names) {
  std::string out = "step";
  for (const std::string& n : names) out += ", " + n;
  return out;
}

}  // namespace

std::map<std::string, TensorData> Optimizer::state_dict() const {
  std::map<std::string, TensorData> out;
  std::vector<std::string> keys;
  kiln::detail::Prims values;
  for (const auto& [param_name, state] : states_) {
    out.emplace(param_name + ".step", count_data(state.step));
    for (const auto& [buffer_name, value] : state.buffers) {
      keys.push_back(param_name + "." + buffer_name);
      values.push_back(value);
    }
  }
  // One read for all buffers, so a device synchronises once.
  std::vector<TensorData> data = kiln::detail::read_many(std::move(values));
  for (std::size_t i = 0; i < keys.size(); ++i) out.emplace(keys[i], std::move(data[i]));
  out.emplace(std::string(kStepsKey), count_data(steps_));
  return out;
}

void Optimizer::load_state(const std::vector<nn::NamedParam>& params,
                           const std::map<std::string, TensorData>& state) {
  const std::string op = kiln::detail::concat(name(), "::load_state_dict");
  std::map<std::string, const nn::NamedParam*, std::less<>> trainable;
  for (const nn::NamedParam& p : params) {
    if (p.trainable) trainable.emplace(p.name, &p);
  }
  const std::vector<std::string> fields = buffer_names();
  std::map<std::string, ParamState, std::less<>> loaded;
  std::set<std::string, std::less<>> counted;
  std::optional<std::int64_t> steps;
  for (const auto& [key, data] : state) {
    if (key == kStepsKey) {
      steps = read_count(data, key, op);
      continue;
    }
    const std::size_t dot = key.rfind('.');
    if (dot == std::string::npos) {
      fail<InvalidArgument>(op, "entry '", key, "' is not of the form '<parameter>.<field>'");
    }
    const std::string_view param_name = std::string_view(key).substr(0, dot);
    const std::string_view field = std::string_view(key).substr(dot + 1);
    auto param_it = trainable.find(param_name);
    if (param_it == trainable.end()) {
      fail<InvalidArgument>(op, "entry '", key, "' is for '", param_name,
                            "', which is not a trainable parameter of the module");
    }
    const Primitive& param = param_it->second->value;
    ParamState& ps = loaded[std::string(param_name)];
    record_owner(ps, param);
    if (field == "step") {
      ps.step = read_count(data, key, op);
      counted.emplace(param_name);
      continue;
    }
    if (std::find(fields.begin(), fields.end(), field) == fields.end()) {
      fail<InvalidArgument>(op, "entry '", key, "': ", name(), " with these settings keeps no '",
                            field, "' (it keeps ", list(fields), ")");
    }
    if (!is_float(data.dtype())) {
      fail<DTypeMismatch>(op, "entry '", key, "' must be a float tensor, got ",
                          dtype_name(data.dtype()));
    }
    if (data.shape() != param->shape()) {
      fail<ShapeMismatch>(op, "entry '", key, "' has shape ", data.shape().to_string(),
                          " but parameter '", param_name, "' has shape ",
                          param->shape().to_string());
    }
    TensorData converted = data.dtype() == param->dtype() ? data : data.convert(param->dtype());
    ps.put(field, kiln::detail::from_data(std::move(converted), param->device().without_autodiff(),
                                          Kind::Float, param->rank()));
  }
  for (const auto& [param_name, ps] : loaded) {
    if (!counted.contains(param_name)) {
      fail<InvalidArgument>(op, "entry '", param_name, ".step' is missing");
    }
    for (const std::string& field : fields) {
      if (!ps.buffers.contains(field)) {
        fail<InvalidArgument>(op, "entry '", param_name, ".", field, "' is missing");
      }
    }
  }
  if (!steps) fail<InvalidArgument>(op, "entry '", kStepsKey, "' is missing");
  states_ = std::move(loaded);
  steps_ = *steps;
}

}  // namespace kiln::optim
