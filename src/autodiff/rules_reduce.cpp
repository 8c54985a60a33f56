// Backward rules of reductions: the gradient spreads back over the reduced elements.
#include "autodiff/rules.h"

namespace kiln::autodiff {

// sum: every element gets g.
Primitive AutodiffBackend::sum(Primitive x) {
  return record<1>(
      "sum", Cost::Stored, {std::move(x)}, kKeepNone,
      [](Backend& b, Inputs<1> in) { return b.sum(std::move(in[0])); },
      [shape = x->shape()](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        return {b.expand(b.reshape(std::move(g), defaults::ones_shape(shape.rank())), shape)};
      });
}

Primitive AutodiffBackend::sum_dim(Primitive x, std::int64_t dim) {
  return record<1>(
      "sum_dim", Cost::Stored, {std::move(x)}, kKeepNone,
      [dim](Backend& b, Inputs<1> in) { return b.sum_dim(std::move(in[0]), dim); },
      [shape = x->shape()](BackwardArgs& r, Primitive g) -> Grads {
        return {r.b.expand(std::move(g), shape)};
      });
}

// mean: every element gets g / n.
Primitive AutodiffBackend::mean(Primitive x) {
  return record<1>(
      "mean", Cost::Stored, {std::move(x)}, kKeepNone,
      [](Backend& b, Inputs<1> in) { return b.mean(std::move(in[0])); },
      [shape = x->shape()](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        const double n = static_cast<double>(shape.num_elements());
        Primitive spread = b.reshape(scale(b, std::move(g), 1.0 / n), defaults::ones_shape(shape.rank()));
        return {b.expand(std::move(spread), shape)};
      });
}

Primitive AutodiffBackend::mean_dim(Primitive x, std::int64_t dim) {
  return record<1>(
      "mean_dim", Cost::Stored, {std::move(x)}, kKeepNone,
      [dim](Backend& b, Inputs<1> in) { return b.mean_dim(std::move(in[0]), dim); },
      [shape = x->shape(), dim](BackwardArgs& r, Primitive g) -> Grads {
        const double n = static_cast<double>(shape[static_cast<std::size_t>(dim)]);
        return {r.b.expand(scale(r.b, std::move(g), 1.0 / n), shape)};
      });
}

}  // namespace kiln::autodiff
