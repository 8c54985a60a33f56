// Backward rules of reductions: the gradient spreads back over the reduced elements.
#include <optional>

#include "decorators/autodiff/rules.h"

namespace kiln::autodiff {

// sum: every element gets g.
Primitive AutodiffBackend::sum(Primitive x) {
  const Shape shape = x->shape();
  return record<1>(
      "sum", Cost::Stored, {std::move(x)}, kKeepNone,
      [](Backend& b, Inputs<1> in) { return b.sum(std::move(in[0])); },
      [shape](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        return {b.expand(b.reshape(std::move(g), defaults::ones_shape(shape.rank())), shape)};
      });
}

Primitive AutodiffBackend::sum_dim(Primitive x, std::int64_t dim) {
  const Shape shape = x->shape();
  return record<1>(
      "sum_dim", Cost::Stored, {std::move(x)}, kKeepNone,
      [dim](Backend& b, Inputs<1> in) { return b.sum_dim(std::move(in[0]), dim); },
      [shape](BackwardArgs& r, Primitive g) -> Grads { return {r.b.expand(std::move(g), shape)}; });
}

// mean: every element gets g / n.
Primitive AutodiffBackend::mean(Primitive x) {
  const Shape shape = x->shape();
  return record<1>(
      "mean", Cost::Stored, {std::move(x)}, kKeepNone,
      [](Backend& b, Inputs<1> in) { return b.mean(std::move(in[0])); },
      [shape](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        const double n = static_cast<double>(shape.num_elements());
        Primitive spread =
            b.reshape(scale(b, std::move(g), 1.0 / n), defaults::ones_shape(shape.rank()));
        return {b.expand(std::move(spread), shape)};
      });
}

Primitive AutodiffBackend::mean_dim(Primitive x, std::int64_t dim) {
  const Shape shape = x->shape();
  return record<1>(
      "mean_dim", Cost::Stored, {std::move(x)}, kKeepNone,
      [dim](Backend& b, Inputs<1> in) { return b.mean_dim(std::move(in[0]), dim); },
      [shape, dim](BackwardArgs& r, Primitive g) -> Grads {
        const double n = static_cast<double>(shape[static_cast<std::size_t>(dim)]);
        return {r.b.expand(scale(r.b, std::move(g), 1.0 / n), shape)};
      });
}

// logsumexp: each element gets g times its softmax weight, exp(x - out).
Primitive AutodiffBackend::logsumexp_dim(Primitive x, std::int64_t dim) {
  return record<1>(
      "logsumexp_dim", Cost::Stored, {std::move(x)}, kKeepIn0 | kKeepOut,
      [dim](Backend& b, Inputs<1> in) { return b.logsumexp_dim(std::move(in[0]), dim); },
      [](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        return {b.mul(std::move(g), b.exp(b.sub(r.in(0), r.out())))};
      });
}

namespace {

using defaults::ones_shape;
using defaults::with_dim;

// The products of the elements before each position along dim (1 at the first).
Primitive exclusive_cumprod(Backend& b, const Primitive& x, std::int64_t dim) {
  const std::int64_t n = x->shape()[static_cast<std::size_t>(dim)];
  Primitive one = b.ones(with_dim(x->shape(), dim, 1), x->dtype(), x->device());
  if (n == 1) return one;
  return b.cumprod(b.cat({std::move(one), defaults::slice_dim(b, x, dim, 0, n - 1)}, dim), dim);
}

// g times the product of the other elements of each line along dim. The products before and
// after each position are multiplied rather than out / x divided, so zeros need no special case;
// 16-bit floats multiply in f32, as the forward does.
Primitive prod_grad(Backend& b, Primitive x, Primitive g, std::int64_t dim) {
  const DType dtype = x->dtype();
  x = defaults::to_compute(b, std::move(x));
  const Axes axis{dim};
  Primitive before = exclusive_cumprod(b, x, dim);
  Primitive after = b.flip(exclusive_cumprod(b, b.flip(x, axis), dim), axis);
  Primitive others = b.mul(std::move(before), std::move(after));
  return defaults::from_compute(b, b.mul(defaults::to_compute(b, std::move(g)), std::move(others)),
                                dtype);
}

}  // namespace

Primitive AutodiffBackend::prod(Primitive x) {
  const Shape shape = x->shape();
  return record<1>(
      "prod", Cost::Stored, {std::move(x)}, kKeepIn0,
      [](Backend& b, Inputs<1> in) { return b.prod(std::move(in[0])); },
      [shape](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        const std::int64_t n = shape.num_elements();
        if (n == 0) return {b.zeros(shape, g->dtype(), g->device())};
        Primitive flat = b.reshape(r.in(0), Shape{n});
        return {b.reshape(prod_grad(b, std::move(flat), std::move(g), 0), shape)};
      });
}

Primitive AutodiffBackend::prod_dim(Primitive x, std::int64_t dim) {
  const Shape shape = x->shape();
  return record<1>(
      "prod_dim", Cost::Stored, {std::move(x)}, kKeepIn0,
      [dim](Backend& b, Inputs<1> in) { return b.prod_dim(std::move(in[0]), dim); },
      [shape, dim](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        if (shape.num_elements() == 0) return {b.zeros(shape, g->dtype(), g->device())};
        return {prod_grad(b, r.in(0), std::move(g), dim)};
      });
}

namespace {

// max / min over everything (dim empty) or along dim: g is split evenly among the elements equal
// to the extremum. That is PyTorch's convention for amax, and at a two-way tie it is also the
// mean of the two one-sided slopes (what central differences measure).
template <class Forward>
Primitive extremum(AutodiffBackend& self, const char* op, Primitive x,
                   std::optional<std::int64_t> dim, Forward forward) {
  return self.record<1>(op, Cost::Stored, {std::move(x)}, kKeepIn0 | kKeepOut, std::move(forward),
                        [dim](BackwardArgs& r, Primitive g) -> Grads {
                          Backend& b = r.b;
                          Primitive x = r.in(0);
                          Primitive out = r.out();
                          const Shape ones = ones_shape(x->rank());
                          if (!dim) {
                            out = b.reshape(std::move(out), ones);
                            g = b.reshape(std::move(g), ones);
                          }
                          Primitive hit = as_float(b, b.equal(x, std::move(out)), x);
                          Primitive count =
                              dim ? b.sum_dim(hit, *dim) : b.reshape(b.sum(hit), ones);
                          return {b.mul(std::move(hit), b.div(std::move(g), std::move(count)))};
                        });
}

// The values and indices of max/min along dim: the gradient goes to the index returned (one
// element per line even on ties, as PyTorch's max(dim) does).
template <class Pair>
PrimitivePair extremum_with_indices(AutodiffBackend& self, const char* op, Primitive x,
                                    std::int64_t dim, Pair pair) {
  if (!node_of(x)) {
    auto [values, indices] = pair(self.inner(), take_inner(std::move(x)));
    return {wrap(std::move(values)), wrap(std::move(indices))};
  }
  const Shape shape = x->shape();
  auto [values, indices] = pair(self.inner(), inner_of(x));
  Primitive recorded = self.record<1>(
      op, Cost::Stored, {std::move(x)}, kKeepNone,
      [pair](Backend& b, Inputs<1> in) { return pair(b, std::move(in[0])).first; },
      // An init-capture: clang before 16 cannot capture a structured binding itself.
      [shape, dim, indices = indices](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive zeros = b.zeros(shape, g->dtype(), g->device());
        return {b.scatter(dim, std::move(zeros), indices, std::move(g), IndexingUpdate::Add)};
      },
      std::move(values));
  return {std::move(recorded), wrap(std::move(indices))};
}

}  // namespace

Primitive AutodiffBackend::max(Primitive x) {
  return extremum(*this, "max", std::move(x), std::nullopt,
                  [](Backend& b, Inputs<1> in) { return b.max(std::move(in[0])); });
}

Primitive AutodiffBackend::min(Primitive x) {
  return extremum(*this, "min", std::move(x), std::nullopt,
                  [](Backend& b, Inputs<1> in) { return b.min(std::move(in[0])); });
}

Primitive AutodiffBackend::max_dim(Primitive x, std::int64_t dim) {
  return extremum(*this, "max_dim", std::move(x), dim,
                  [dim](Backend& b, Inputs<1> in) { return b.max_dim(std::move(in[0]), dim); });
}

Primitive AutodiffBackend::min_dim(Primitive x, std::int64_t dim) {
  return extremum(*this, "min_dim", std::move(x), dim,
                  [dim](Backend& b, Inputs<1> in) { return b.min_dim(std::move(in[0]), dim); });
}

PrimitivePair AutodiffBackend::max_dim_with_indices(Primitive x, std::int64_t dim,
                                                    DType index_dtype) {
  return extremum_with_indices(*this, "max_dim_with_indices", std::move(x), dim,
                               [dim, index_dtype](Backend& b, Primitive v) {
                                 return b.max_dim_with_indices(std::move(v), dim, index_dtype);
                               });
}

PrimitivePair AutodiffBackend::min_dim_with_indices(Primitive x, std::int64_t dim,
                                                    DType index_dtype) {
  return extremum_with_indices(*this, "min_dim_with_indices", std::move(x), dim,
                               [dim, index_dtype](Backend& b, Primitive v) {
                                 return b.min_dim_with_indices(std::move(v), dim, index_dtype);
                               });
}

}  // namespace kiln::autodiff
