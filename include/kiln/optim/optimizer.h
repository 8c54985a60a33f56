// Optimizers: an object holding its settings and the per-parameter state (keyed by the
// parameter's dotted name) that updates a module in training mode from one backward pass.
//
//   auto model = nn::train(Mlp{...});
//   optim::Adam opt({.weight_decay = 1e-4});
//   optim::CosineAnnealingLr schedule{.base_lr = 1e-3, .t_max = 1000};
//   for (...) {
//     Gradients grads = loss_of(model, batch).backward();
//     optim::clip_grad_norm(model, grads, 1.0);
//     opt.step(model, grads, schedule);        // or opt.step(model, grads, 1e-3)
//   }
//   auto saved = opt.state_dict();              // "fc.weight.exp_avg", ..., "optimizer.steps"
//   optim::Adam resumed({.weight_decay = 1e-4});
//   resumed.load_state_dict(model, saved);      // continues exactly where opt was
//
// step() visits the module's trainable parameters; one with a gradient in `grads` is updated
// with ops on its plain (non-autodiff) value, so no graph is recorded, and replaced by a fresh
// tracked leaf on the autodiff device. One without a gradient (an unused branch, a module in
// validation mode) is left as it is, and so is its state. Updates run in the parameter's dtype
// (a gradient of another dtype is cast to it) and state stays on the parameter's device.
// If an update fails (a device error), the parameters updated before it keep their new values
// and the failing parameter's state is dropped, so a later step starts it afresh.
//
// Inside a capture (kiln/graph.h) step() writes each parameter and its state in place, so each
// replay of the captured step updates them again. Such a step needs the state to exist (run one
// step before capturing; InvalidArgument otherwise). While any captured graph exists, eager
// steps write in place too, so the graph and the module keep sharing their tensors. Each replay
// advances steps() and the parameters' step counts and takes the learning rate (a fixed one, or the
// schedule's at the new step count) and Adam's bias corrections afresh; the optimizer must outlive
// the graph.
//
// State belongs to one parameter: it records the shape, dtype and device it was made for, and a
// step that finds a parameter of that name with another shape, dtype or device (another model,
// a layer rebuilt at another size, a module cast or moved since) throws InvalidArgument naming
// the parameter and both, before any parameter changes: stale state is never broadcast into a
// parameter. reset() starts afresh; load_state_dict(moved, state_dict()) carries the state over
// to a module moved or cast since (it converts and moves the buffers).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/nn/module.h"
#include "kiln/optim/scheduler.h"

namespace kiln::optim {

// What one parameter carries from one step to the next.
struct ParamState {
  // How many updates the parameter has had, this one included while it is being updated (Adam's
  // bias correction uses it). Parameters skipped for lack of a gradient do not advance.
  std::int64_t step = 0;
  // Tensors named as in PyTorch (exp_avg, momentum_buffer, ...), shaped and typed like the
  // parameter, on its device without the autodiff flag.
  std::map<std::string, Primitive, std::less<>> buffers;
  // The parameter the state was made for (at its first update or by load_state_dict); its
  // device is without the autodiff flag.
  Shape shape;
  DType dtype = DType::F32;
  Device device = Device::cpu();

  // Moves a buffer out, so the op consuming it may reuse its memory; nullptr when absent.
  Primitive take(std::string_view name);
  // Moves a buffer out, or makes zeros shaped, typed and placed like `like` when absent.
  Primitive take_or_zeros(std::string_view name, const Primitive& like);
  void put(std::string_view name, Primitive value);
};

// The numbers an update multiplies or divides by that change from step to step (the learning
// rate, bias corrections), as the optimizer's step_values gives them: host numbers in an eager
// step; inside a capture (kiln/graph.h) tensors of one element on the parameter's device, which
// each replay refreshes, so a replayed step uses its own learning rate and step count.
class StepValues {
 public:
  explicit StepValues(std::vector<double> host) : host_(std::move(host)) {}
  StepValues(std::vector<double> host, std::vector<Primitive> device)
      : host_(std::move(host)), device_(std::move(device)) {}
  double host(std::size_t i) const { return host_.at(i); }
  // x * value i, x / value i.
  Primitive mul(Primitive x, std::size_t i) const;
  Primitive div(Primitive x, std::size_t i) const;

 private:
  std::vector<double> host_;
  std::vector<Primitive> device_;  // empty in an eager step
};

// The state_dict entry holding the optimizer's step count (what schedules are indexed by).
inline constexpr std::string_view kStepsKey = "optimizer.steps";

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Updates module's trainable parameters that have a gradient in grads, with learning rate lr
  // (a finite number >= 0; InvalidArgument otherwise). Returns how many parameters it updated.
  template <nn::detail::Visitable M>
  std::size_t step(M& module, const Gradients& grads, double lr) {
    return step_module(&module, nn::detail::visit_fn<M>, grads, lr);
  }
  // The same with the rate schedule.lr(steps()): the schedule's step 0 is the first update.
  template <nn::detail::Visitable M, LrSchedule S>
  std::size_t step(M& module, const Gradients& grads, const S& schedule) {
    return step_module(
        &module, nn::detail::visit_fn<M>, grads, static_cast<double>(schedule.lr(steps_)),
        [schedule](std::int64_t steps) { return static_cast<double>(schedule.lr(steps)); });
  }

  // How many times step() has run (parameters updated or not).
  std::int64_t steps() const noexcept { return steps_; }
  // The state of the parameter with this dotted name, or nullptr before its first update.
  const ParamState* state(std::string_view name) const;
  // Names of the parameters that have state, sorted.
  std::vector<std::string> state_names() const;
  // Forgets every parameter's state and the step count.
  void reset() noexcept;

  // The whole state as host tensors: "<param>.step" (I64, shape [1]), "<param>.<buffer>" (the
  // parameter's shape and dtype) and kStepsKey (I64, shape [1]). The map is what
  // record::save_safetensors writes.
  std::map<std::string, TensorData> state_dict() const;
  // Replaces the state with one state_dict() produced, checked against module: every entry must
  // name a trainable parameter of module and a field this optimizer keeps under its settings
  // (InvalidArgument otherwise), buffers must have the parameter's shape (ShapeMismatch) and a
  // float dtype (DTypeMismatch; converted to the parameter's dtype and moved to its device),
  // and each parameter's entries must be complete. Nothing changes when a check fails.
  template <nn::detail::Visitable M>
  void load_state_dict(const M& module, const std::map<std::string, TensorData>& state) {
    load_state(nn::named_parameters(module), state);
  }

  // "SGD", "Adam", "AdamW", "RMSprop": names error messages.
  virtual std::string_view name() const noexcept = 0;

 protected:
  Optimizer() = default;
  Optimizer(const Optimizer&) = default;
  Optimizer(Optimizer&&) noexcept = default;
  Optimizer& operator=(const Optimizer&) = default;
  Optimizer& operator=(Optimizer&&) noexcept = default;

  // The numbers of one update that change between steps (StepValues), for learning rate lr at the
  // parameter's step `step` (this update counted). The learning rate alone by default.
  virtual std::vector<double> step_values(double lr, std::int64_t /*step*/) const { return {lr}; }
  // The new value of one parameter. param and grad are plain tensors of the parameter's dtype
  // and device; state.step already counts this update; values are step_values' numbers.
  virtual Primitive update(Primitive param, Primitive grad, const StepValues& values,
                           ParamState& state) const = 0;
  // The buffers every updated parameter holds under these settings (load_state_dict checks them).
  virtual std::vector<std::string> buffer_names() const = 0;
  // Why a step under these settings cannot be captured (kiln/graph.h), or empty when it can.
  virtual std::string_view capture_refusal() const noexcept { return {}; }

 private:
  // lr_at: the learning rate at a step count (a schedule's), for replays; empty: lr always.
  std::size_t step_module(void* module, nn::detail::VisitFn visit, const Gradients& grads,
                          double lr, std::function<double(std::int64_t)> lr_at = {});
  void load_state(const std::vector<nn::NamedParam>& params,
                  const std::map<std::string, TensorData>& state);

  std::int64_t steps_ = 0;
  std::map<std::string, ParamState, std::less<>> states_;
};

}  // namespace kiln::optim
