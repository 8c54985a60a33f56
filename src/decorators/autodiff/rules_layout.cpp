// Backward rules of layout ops: the gradient is moved back by the inverse movement. They keep no
// values, only shapes and parameters, and count as elementwise (a view is free to recompute).
#include "decorators/autodiff/rules.h"

namespace kiln::autodiff {

Primitive AutodiffBackend::reshape(Primitive x, Shape shape) {
  const Shape from = x->shape();
  return record<1>(
      "reshape", Cost::Elementwise, {std::move(x)}, kKeepNone,
      [shape](Backend& b, Inputs<1> in) { return b.reshape(std::move(in[0]), shape); },
      [from](BackwardArgs& r, Primitive g) -> Grads { return {r.b.reshape(std::move(g), from)}; });
}

// expand may add leading dims as well as stretch dims of size 1: both are summed away.
Primitive AutodiffBackend::expand(Primitive x, Shape shape) {
  const Shape from = x->shape();
  return record<1>(
      "expand", Cost::Elementwise, {std::move(x)}, kKeepNone,
      [shape](Backend& b, Inputs<1> in) { return b.expand(std::move(in[0]), shape); },
      [from](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        const std::size_t lead = g->rank() - from.rank();
        for (std::size_t d = 0; d < g->rank(); ++d) {
          const bool stretched = d < lead || (from[d - lead] == 1 && g->shape()[d] != 1);
          if (stretched) g = b.sum_dim(std::move(g), static_cast<std::int64_t>(d));
        }
        return {lead > 0 ? b.reshape(std::move(g), from) : g};
      });
}

Primitive AutodiffBackend::permute(Primitive x, Axes axes) {
  Axes inverse(axes.size());
  for (std::size_t i = 0; i < axes.size(); ++i) {
    inverse[static_cast<std::size_t>(axes[i])] = static_cast<std::int64_t>(i);
  }
  return record<1>(
      "permute", Cost::Elementwise, {std::move(x)}, kKeepNone,
      [axes](Backend& b, Inputs<1> in) { return b.permute(std::move(in[0]), axes); },
      [inverse](BackwardArgs& r, Primitive g) -> Grads {
        return {r.b.permute(std::move(g), inverse)};
      });
}

Primitive AutodiffBackend::swap_dims(Primitive x, std::int64_t dim1, std::int64_t dim2) {
  return record<1>(
      "swap_dims", Cost::Elementwise, {std::move(x)}, kKeepNone,
      [dim1, dim2](Backend& b, Inputs<1> in) { return b.swap_dims(std::move(in[0]), dim1, dim2); },
      [dim1, dim2](BackwardArgs& r, Primitive g) -> Grads {
        return {r.b.swap_dims(std::move(g), dim1, dim2)};
      });
}

Primitive AutodiffBackend::flip(Primitive x, Axes axes) {
  return record<1>(
      "flip", Cost::Elementwise, {std::move(x)}, kKeepNone,
      [axes](Backend& b, Inputs<1> in) { return b.flip(std::move(in[0]), axes); },
      [axes](BackwardArgs& r, Primitive g) -> Grads { return {r.b.flip(std::move(g), axes)}; });
}

// unfold: x [.., n, ..] -> [.., windows, .., size], window w holding x[w * step + j] at j. The
// gradient of every (w, j) is added at w * step + j: the last dim moves next to dim, the pair
// (w, j) flattens to one index along dim, and select_assign adds (windows may overlap).
Primitive AutodiffBackend::unfold(Primitive x, std::int64_t dim, std::int64_t size,
                                  std::int64_t step) {
  const Shape shape = x->shape();
  return record<1>(
      "unfold", Cost::Elementwise, {std::move(x)}, kKeepNone,
      [dim, size, step](Backend& b, Inputs<1> in) {
        return b.unfold(std::move(in[0]), dim, size, step);
      },
      [shape, dim, size, step](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        const std::size_t d = static_cast<std::size_t>(dim);
        const std::int64_t windows = g->shape()[d];
        const std::int64_t last = static_cast<std::int64_t>(shape.rank());
        Primitive zeros = b.zeros(shape, g->dtype(), g->device());
        if (g->shape().num_elements() == 0) return {zeros};
        Axes axes;
        for (std::int64_t a = 0; a < last; ++a) {
          axes.push_back(a);
          if (a == dim) axes.push_back(last);
        }
        Primitive moved = b.reshape(b.permute(std::move(g), std::move(axes)),
                                    defaults::with_dim(shape, dim, windows * size));
        const Device& device = moved->device();
        Primitive starts = b.mul_scalar(b.arange(0, windows, 1, DType::I64, device), step);
        Primitive offsets = b.arange(0, size, 1, DType::I64, device);
        Primitive positions = b.reshape(b.add(b.reshape(std::move(starts), Shape{windows, 1}),
                                              b.reshape(std::move(offsets), Shape{1, size})),
                                        Shape{windows * size});
        return {b.select_assign(std::move(zeros), dim, std::move(positions), std::move(moved),
                                IndexingUpdate::Add)};
      });
}

// cat of a run-time list: each input gets its slice of g along dim.
Primitive AutodiffBackend::cat(PrimitiveList xs, std::int64_t dim) {
  std::vector<std::int64_t> sizes;
  sizes.reserve(xs.size());
  for (const Primitive& x : xs) sizes.push_back(x->shape()[static_cast<std::size_t>(dim)]);
  return record<0>(
      "cat", Cost::Elementwise, std::move(xs), kKeepNone,
      [dim](Backend& b, Inputs<0> in) { return b.cat(std::move(in), dim); },
      [sizes, dim](BackwardArgs& r, Primitive g) -> Grads {
        Grads grads(sizes.size());
        std::int64_t offset = 0;
        for (std::size_t i = 0; i < sizes.size(); ++i) {
          if (r.needs(i)) grads[i] = defaults::slice_dim(r.b, g, dim, offset, sizes[i]);
          offset += sizes[i];
        }
        return grads;
      });
}

// repeat_dim: [.., n, ..] -> [.., times * n, ..]; copy t of x sits at [t * n, (t + 1) * n), so
// viewing g as [.., times, n, ..] and summing over the copies gives the gradient.
Primitive AutodiffBackend::repeat_dim(Primitive x, std::int64_t dim, std::int64_t times) {
  const Shape shape = x->shape();
  return record<1>(
      "repeat_dim", Cost::Elementwise, {std::move(x)}, kKeepNone,
      [dim, times](Backend& b, Inputs<1> in) { return b.repeat_dim(std::move(in[0]), dim, times); },
      [shape, dim, times](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        if (g->shape().num_elements() == 0) return {b.zeros(shape, g->dtype(), g->device())};
        detail::DimVector copies(shape.vector());
        copies.insert(static_cast<std::size_t>(dim), times);
        Primitive split = b.reshape(std::move(g), Shape(std::move(copies)));
        return {b.reshape(b.sum_dim(std::move(split), dim), shape)};
      });
}

}  // namespace kiln::autodiff
