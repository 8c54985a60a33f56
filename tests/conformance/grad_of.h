// Second derivatives in gradcheck rows: grad_of returns a gradient recorded with create_graph,
// so gradcheck differentiating it checks the rules that backward ran (the rules of the rules).
#pragma once

#include <functional>

#include "conformance/gradcheck.h"

namespace kiln::conformance {

// d/dx sum(f(x) * seed), as a tracked tensor (x and seed tracked or not).
inline Primitive grad_of(const Primitive& x, const Primitive& seed,
                         const std::function<Primitive(const Primitive&)>& f) {
  const Primitive leaf = detail::require_grad(x, true);
  const Gradients grads = detail::backward(f(leaf), seed, {.create_graph = true});
  std::optional<Primitive> g = detail::grad(leaf, grads);
  if (!g) ADD_FAILURE() << "grad_of: no gradient reached x";
  return g ? *g : detail::full(x->shape(), 0.0, x->dtype(), x->device(), Kind::Float);
}

}  // namespace kiln::conformance
