// The gradients of a module's trainable parameters in one backward pass's Gradients: what
// clipping and the loss scaler act on.
#pragma once

#include <vector>

#include "kiln/nn/module.h"

namespace kiln::optim::detail {

// A parameter's tracked value and its gradient's plain value.
struct ParamGrad {
  Primitive param;
  Primitive grad;
};

// Every trainable parameter of module with a gradient in grads, each once (tied weights count
// once, as in PyTorch), in the module's visiting order.
std::vector<ParamGrad> collect_param_grads(void* module, nn::detail::VisitFn visit,
                                           const Gradients& grads);

}  // namespace kiln::optim::detail
