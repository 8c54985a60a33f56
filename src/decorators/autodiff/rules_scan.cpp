// Backward rules of cumulative ops: out[k] depends on x[0..k] along dim, so the gradient of x[i]
// gathers the gradients of out[i..] (sums taken from the back).
#include "decorators/autodiff/rules.h"

namespace kiln::autodiff {
namespace {

// sum over j >= i of t[j] along dim.
Primitive reverse_cumsum(Backend& b, Primitive t, std::int64_t dim) {
  const Axes axis{dim};
  return b.flip(b.cumsum(b.flip(std::move(t), axis), dim), axis);
}

// d/dx[i] of sum_k g[k] * prod_{j<=k} x[j], exact with zeros. Before the first zero of a line
// x[i] != 0 and the gradient is reverse_cumsum(g * out)[i] / x[i]. At the first zero it is
// reverse_cumsum(g * cumprod(x with that zero set to 1))[i], with no division. After it every
// product holds the first zero, so the gradient is 0.
Primitive cumprod_grad(Backend& b, Primitive x, Primitive g, std::int64_t dim) {
  Primitive is_zero = b.equal_elem(x, 0);
  Primitive zeros_so_far = b.cumsum(b.cast(is_zero, DType::I64), dim);
  Primitive before = b.equal_elem(zeros_so_far, 0);
  Primitive after_before = b.logical_not(before);
  Primitive first = b.logical_and(std::move(is_zero), b.equal_elem(std::move(zeros_so_far), 1));

  Primitive out = b.cumprod(x, dim);
  Primitive safe_x = b.mask_fill(x, after_before, 1);
  Primitive early = b.div(reverse_cumsum(b, b.mul(g, std::move(out)), dim), std::move(safe_x));
  early = b.mask_fill(std::move(early), std::move(after_before), 0);

  Primitive skipped = b.cumprod(b.mask_fill(std::move(x), first, 1), dim);
  Primitive at_zero = reverse_cumsum(b, b.mul(std::move(g), std::move(skipped)), dim);
  at_zero = b.mask_fill(std::move(at_zero), b.logical_not(std::move(first)), 0);
  return b.add(std::move(early), std::move(at_zero));
}

// cummax / cummin: out[k] is x[j] for the last j <= k where x reached the running extremum
// (x[j] == out[j]); the gradient of out[k] goes to that j (PyTorch's index on ties).
template <class Forward>
Primitive running_extremum(AutodiffBackend& self, const char* op, Primitive x, std::int64_t dim,
                           Forward forward) {
  return self.record<1>(
      op, Cost::Stored, {std::move(x)}, kKeepIn0 | kKeepOut, std::move(forward),
      [dim](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive x = r.in(0);
        const Shape shape = x->shape();
        if (shape.num_elements() == 0) return {zeros_like(b, g)};
        const std::int64_t n = shape[static_cast<std::size_t>(dim)];
        Primitive reached = b.cast(b.equal(std::move(x), r.out()), DType::I64);
        Primitive positions =
            b.reshape(b.arange(0, n, 1, DType::I64, g->device()),
                      defaults::with_dim(defaults::ones_shape(shape.rank()), dim, n));
        Primitive source = b.cummax(b.mul(std::move(reached), std::move(positions)), dim);
        Primitive zeros = zeros_like(b, g);
        return {
            b.scatter(dim, std::move(zeros), std::move(source), std::move(g), IndexingUpdate::Add)};
      });
}

}  // namespace

Primitive AutodiffBackend::cumsum(Primitive x, std::int64_t dim) {
  return record<1>(
      "cumsum", Cost::Stored, {std::move(x)}, kKeepNone,
      [dim](Backend& b, Inputs<1> in) { return b.cumsum(std::move(in[0]), dim); },
      [dim](BackwardArgs& r, Primitive g) -> Grads {
        return {reverse_cumsum(r.b, std::move(g), dim)};
      });
}

Primitive AutodiffBackend::cumprod(Primitive x, std::int64_t dim) {
  return record<1>(
      "cumprod", Cost::Stored, {std::move(x)}, kKeepIn0,
      [dim](Backend& b, Inputs<1> in) { return b.cumprod(std::move(in[0]), dim); },
      [dim](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive x = r.in(0);
        if (x->shape().num_elements() == 0) return {zeros_like(b, g)};
        // 16-bit floats multiply and sum in f32, as the forward does.
        const DType dtype = x->dtype();
        Primitive grad = cumprod_grad(b, defaults::to_compute(b, std::move(x)),
                                      defaults::to_compute(b, std::move(g)), dim);
        return {defaults::from_compute(b, std::move(grad), dtype)};
      });
}

Primitive AutodiffBackend::cummax(Primitive x, std::int64_t dim) {
  return running_extremum(*this, "cummax", std::move(x), dim, [dim](Backend& b, Inputs<1> in) {
    return b.cummax(std::move(in[0]), dim);
  });
}

Primitive AutodiffBackend::cummin(Primitive x, std::int64_t dim) {
  return running_extremum(*this, "cummin", std::move(x), dim, [dim](Backend& b, Inputs<1> in) {
    return b.cummin(std::move(in[0]), dim);
  });
}

}  // namespace kiln::autodiff
