// Automatic mixed precision: inside an AutocastScope, ops on the scope's device run in the dtype
// ops.def's amp column gives them, as PyTorch's autocast does.
//
//   {
//     kiln::AutocastScope amp(dev, kiln::DType::BF16);
//     auto y = x.matmul(w);            // bf16: products, linear, convolutions, attention
//     auto p = activation::softmax(y, 1);  // f32: exp/log, powers, sums, softmax, the norms
//     auto z = y + bias;               // bf16 + f32 promotes to f32, as outside the scope
//   }
//
// Only float inputs are cast (f32 down to the low type for LOW ops, f16/bf16 up to f32 for F32
// ops, to the widest float among the inputs for WIDEST ops); f64, integer and bool inputs never
// are. A scope covers the ops of its thread on the device's hardware, whatever the decorator
// chain (dev, dev.autodiff() and dev.fused() alike); scopes nest, the innermost deciding, and
// `enabled = false` turns autocast off inside an enclosing scope. Under autodiff the casts are
// recorded like any op, so an f32 parameter's gradient is f32. A tensor held elsewhere (a
// module's weight) is cast once per scope: later uses in the scope reuse the cast.
#pragma once

#include <memory>
#include <optional>

#include "kiln/device.h"
#include "kiln/dtype.h"

namespace kiln {

class AutocastScope {
 public:
  // dtype: DType::F16 or DType::BF16 (InvalidArgument otherwise).
  AutocastScope(const Device& device, DType dtype, bool enabled = true);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

  Device device() const noexcept;
  DType dtype() const noexcept;
  bool enabled() const noexcept;

  struct State;  // src/decorators/autocast/autocast_scope.cpp

 private:
  std::unique_ptr<State> state_;
};

// The low-precision dtype ops on device run in on this thread now, or nullopt outside any
// enabled scope for device's hardware.
std::optional<DType> autocast_dtype(const Device& device) noexcept;

}  // namespace kiln
