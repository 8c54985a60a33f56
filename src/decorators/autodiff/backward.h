// The backward pass over a graph of autodiff nodes.
#pragma once

#include "decorators/autodiff/node.h"
#include "kiln/autodiff.h"

namespace kiln::autodiff {

// Gradients of every leaf reachable from root, seeded with seed (of root's shape; an inner
// primitive, or an autodiff one under create_graph). Frees the graph it walked unless options keep
// it.
Gradients run_backward(const NodeRef& root, Primitive seed, const BackwardOptions& options);

}  // namespace kiln::autodiff
