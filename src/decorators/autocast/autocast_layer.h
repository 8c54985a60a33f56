// The autocast layer: the backend that serves a device's ops on a thread inside an
// AutocastScope (kiln/autocast.h). It sits over the device's whole chain (autocast<autodiff<...>>,
// so that autodiff records its casts) and casts each op's float inputs as ops.def's amp column
// says before forwarding the op; ops whose amp is KEEP forward untouched.
#pragma once

#include <atomic>

#include "contract/forwarding.h"
#include "kiln/autocast.h"
#include "kiln/detail/op_columns.h"

namespace kiln::autocast {

// Scopes alive in the process, on any thread: while 0, backend_for does not look further.
extern std::atomic<int> live_scopes;

// The innermost enabled scope of this thread that covers device's hardware, or nullptr (also
// while the layer is suspended on this thread).
const AutocastScope::State* scope_for(const Device& device) noexcept;

// Suspends the layer on this thread while it lives: ops that the layer forwards, and ops those
// compose (a backend's defaults, autodiff's backward rules), run as they would outside a scope.
class Suspension {
 public:
  Suspension() noexcept;
  ~Suspension();
  Suspension(const Suspension&) = delete;
  Suspension& operator=(const Suspension&) = delete;

 private:
  bool was_;
};

// x cast to dtype through backend (the chain below the layer, which records the cast). A source
// that something besides this op holds (a module's weight) is cast once per scope: the scope
// keeps the cast while the source lives.
Primitive cast_in_scope(Backend& backend, const Primitive& x, DType dtype);

// A weight the tensor layer is about to rearrange (linear transposes its [out, in] weight into
// a fresh view, whose cast could not be found again), or an operand it casts with that weight:
// w cast to the scope's low dtype as the layer would cast it (once per scope where something
// else holds w), when a scope covers it and it is f32; w itself otherwise.
Primitive cast_weight(const Primitive& w);

// Drops the scope's cast of x, if any (x is being written in place).
void forget_cast(const Primitive& x) noexcept;

class AutocastBackend : public ForwardingBackend {
 public:
  AutocastBackend(std::shared_ptr<Backend> inner, DType dtype)
      : ForwardingBackend(std::move(inner)), dtype_(dtype) {}

  std::string name() const override { return "autocast<" + inner().name() + ">"; }
  void assign(const Primitive& dst, Primitive src) override;

#define KILN_AMP_CASTS_LOW 1
#define KILN_AMP_CASTS_F32 1
#define KILN_AMP_CASTS_WIDEST 1
#define KILN_AMP_CASTS_KEEP 0
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  KILN_WHEN(KILN_AMP_CASTS_##amp)(result name params override;)
#include "kiln/detail/ops.def"
#undef KILN_OP

 private:
  DType dtype_;  // the scope's low-precision type: f16 or bf16
};

}  // namespace kiln::autocast
