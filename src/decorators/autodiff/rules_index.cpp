// Backward rules of indexing: what was read is scattered back (added, since an index may repeat),
// what was written is gathered. An assignment passes no gradient to the positions it overwrote,
// and of values written to one position twice only the one the kernels keep (the last) gets it.
// Index and mask operands are constants: the rules capture their inner primitives.
#include "decorators/autodiff/rules.h"
#include "kiln/detail/format.h"

namespace kiln::autodiff {
namespace {

using defaults::ones_shape;
using defaults::with_dim;

bool tracked(const Primitive& p) { return node_of(p) != nullptr; }

// Mul, Min and Max updates have no rule; a gradient may not silently skip them.
void check_update(const char* op, IndexingUpdate update, bool any_tracked) {
  if (any_tracked && update != IndexingUpdate::Assign && update != IndexingUpdate::Add) {
    detail::fail<AutodiffError>(op,
                                "only the Assign and Add updates have a backward rule; "
                                "detach() the tensors to combine them with Mul, Min or Max");
  }
}

// 0, 1, ..., n - 1 (i64) laid along dim of a rank-`rank` shape whose other dims are 1.
Primitive positions_along(Backend& b, std::int64_t n, std::size_t rank, std::int64_t dim,
                          const Device& device) {
  Primitive line = b.arange(0, n, 1, DType::I64, device);
  return b.reshape(std::move(line), with_dim(ones_shape(rank), dim, n));
}

// A 1-D mask reshaped to rank dims, its values laid along dim.
Primitive along(Backend& b, Primitive mask, std::size_t rank, std::int64_t dim) {
  const std::int64_t n = mask->shape().num_elements();
  return b.reshape(std::move(mask), with_dim(ones_shape(rank), dim, n));
}

}  // namespace

// ---- gather / scatter along a dim ----

Primitive AutodiffBackend::gather(std::int64_t dim, Primitive x, Primitive indices) {
  const Shape shape = x->shape();
  Primitive index = inner_of(indices);
  return record<1>(
      "gather", Cost::Elementwise, {std::move(x)}, kKeepNone,
      [dim, index](Backend& b, Inputs<1> in) { return b.gather(dim, std::move(in[0]), index); },
      [dim, index, shape](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive zeros = b.zeros(shape, g->dtype(), g->device());
        return {b.scatter(dim, std::move(zeros), index, std::move(g), IndexingUpdate::Add)};
      });
}

Primitive AutodiffBackend::scatter(std::int64_t dim, Primitive x, Primitive indices,
                                   Primitive values, IndexingUpdate update) {
  check_update("scatter", update, tracked(x) || tracked(values));
  const Shape x_shape = x->shape();
  const Shape index_shape = indices->shape();
  Primitive index = inner_of(indices);
  return record<2>(
      "scatter", Cost::Stored, {std::move(x), std::move(values)}, kKeepNone,
      [dim, index, update](Backend& b, Inputs<2> in) {
        return b.scatter(dim, std::move(in[0]), index, std::move(in[1]), update);
      },
      [dim, index, update, x_shape, index_shape](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        const bool assign = update == IndexingUpdate::Assign;
        if (!assign || index_shape.num_elements() == 0) {
          Primitive dv = r.needs(1) ? b.gather(dim, g, index) : nullptr;
          return {r.needs(0) ? g : nullptr, dv};
        }
        // owner: at each position of x, the number (along dim) of the write it kept; -1 if none.
        const std::int64_t line = index_shape[static_cast<std::size_t>(dim)];
        Primitive numbers =
            b.expand(positions_along(b, line, x_shape.rank(), dim, g->device()), index_shape);
        Primitive owner = b.scatter(dim, b.full(x_shape, -1, DType::I64, g->device()), index,
                                    numbers, IndexingUpdate::Max);
        Primitive dx, dv;
        if (r.needs(1)) {
          Primitive lost = b.not_equal(b.gather(dim, owner, index), std::move(numbers));
          dv = b.mask_fill(b.gather(dim, g, index), std::move(lost), 0);
        }
        if (r.needs(0)) dx = b.mask_fill(std::move(g), b.greater_equal_elem(owner, 0), 0);
        return {dx, dv};
      });
}

// ---- select / select_assign: 1-D indices along a dim ----

Primitive AutodiffBackend::select(Primitive x, std::int64_t dim, Primitive indices) {
  const Shape shape = x->shape();
  Primitive index = inner_of(indices);
  return record<1>(
      "select", Cost::Elementwise, {std::move(x)}, kKeepNone,
      [dim, index](Backend& b, Inputs<1> in) { return b.select(std::move(in[0]), dim, index); },
      [dim, index, shape](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive zeros = b.zeros(shape, g->dtype(), g->device());
        return {b.select_assign(std::move(zeros), dim, index, std::move(g), IndexingUpdate::Add)};
      });
}

Primitive AutodiffBackend::select_assign(Primitive x, std::int64_t dim, Primitive indices,
                                         Primitive values, IndexingUpdate update) {
  check_update("select_assign", update, tracked(x) || tracked(values));
  const Shape x_shape = x->shape();
  const std::int64_t count = indices->shape()[0];
  Primitive index = inner_of(indices);
  return record<2>(
      "select_assign", Cost::Stored, {std::move(x), std::move(values)}, kKeepNone,
      [dim, index, update](Backend& b, Inputs<2> in) {
        return b.select_assign(std::move(in[0]), dim, index, std::move(in[1]), update);
      },
      [dim, index, update, x_shape, count](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        if (update != IndexingUpdate::Assign || count == 0) {
          Primitive dv = r.needs(1) ? b.select(g, dim, index) : nullptr;
          return {r.needs(0) ? g : nullptr, dv};
        }
        // owner[i]: the number of the write row i kept (the last: Max finds it), -1 if none.
        const std::size_t rank = x_shape.rank();
        const std::int64_t n = x_shape[static_cast<std::size_t>(dim)];
        Primitive numbers = b.arange(0, count, 1, DType::I64, g->device());
        Primitive owner = b.select_assign(b.full(Shape{n}, -1, DType::I64, g->device()), 0, index,
                                          numbers, IndexingUpdate::Max);
        Primitive dx, dv;
        if (r.needs(1)) {
          Primitive lost = b.not_equal(b.select(owner, 0, index), std::move(numbers));
          dv = b.mask_fill(b.select(g, dim, index), along(b, std::move(lost), rank, dim), 0);
        }
        if (r.needs(0)) {
          Primitive covered = along(b, b.greater_equal_elem(std::move(owner), 0), rank, dim);
          dx = b.mask_fill(std::move(g), std::move(covered), 0);
        }
        return {dx, dv};
      });
}

// ---- gather_nd / scatter_nd: index tuples over the leading dims ----

Primitive AutodiffBackend::gather_nd(Primitive x, Primitive indices) {
  const Shape shape = x->shape();
  Primitive index = inner_of(indices);
  return record<1>(
      "gather_nd", Cost::Elementwise, {std::move(x)}, kKeepNone,
      [index](Backend& b, Inputs<1> in) { return b.gather_nd(std::move(in[0]), index); },
      [index, shape](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive zeros = b.zeros(shape, g->dtype(), g->device());
        return {b.scatter_nd(std::move(zeros), index, std::move(g), IndexingUpdate::Add)};
      });
}

Primitive AutodiffBackend::scatter_nd(Primitive x, Primitive indices, Primitive values,
                                      IndexingUpdate update) {
  check_update("scatter_nd", update, tracked(x) || tracked(values));
  const Shape x_shape = x->shape();
  const Shape values_shape = values->shape();
  const Shape index_shape = indices->shape();
  Primitive index = inner_of(indices);
  return record<2>(
      "scatter_nd", Cost::Stored, {std::move(x), std::move(values)}, kKeepNone,
      [index, update](Backend& b, Inputs<2> in) {
        return b.scatter_nd(std::move(in[0]), index, std::move(in[1]), update);
      },
      [index, update, x_shape, values_shape, index_shape](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        const std::size_t rank = x_shape.rank();
        const std::int64_t depth = index_shape[index_shape.rank() - 1];
        std::int64_t rows = 1;
        for (std::size_t d = 0; d + 1 < index_shape.rank(); ++d) rows *= index_shape[d];
        if (update != IndexingUpdate::Assign || rows == 0) {
          Primitive dv = r.needs(1) ? b.gather_nd(g, index) : nullptr;
          return {r.needs(0) ? g : nullptr, dv};
        }
        // Number the writes (rows of the [rows, depth] table); owner, over the addressed dims,
        // holds the number of the write each position kept (the last: Max finds it), -1 where
        // none was written. With depth 0 every write covers all of x and the last one stays.
        Primitive table = b.reshape(index, Shape{rows, depth});
        Primitive numbers = b.arange(0, rows, 1, DType::I64, g->device());
        detail::DimVector addressed(x_shape.vector());
        addressed.resize(static_cast<std::size_t>(depth));
        Primitive owner, lost;
        if (depth == 0) {
          lost = b.not_equal_elem(numbers, rows - 1);
        } else {
          owner = b.scatter_nd(b.full(Shape(addressed), -1, DType::I64, g->device()), table,
                               numbers, IndexingUpdate::Max);
          lost = b.not_equal(b.gather_nd(owner, table), numbers);
        }
        // Masks broadcast over the dims past the addressed ones.
        auto widen = [&](Primitive mask, detail::DimVector dims) {
          dims.resize(dims.size() + rank - static_cast<std::size_t>(depth), 1);
          return b.reshape(std::move(mask), Shape(std::move(dims)));
        };
        Primitive dx, dv;
        if (r.needs(1)) {
          Primitive picked = b.gather_nd(g, table);  // [rows, dims past the addressed ones]
          picked = b.mask_fill(std::move(picked), widen(std::move(lost), {rows}), 0);
          dv = b.reshape(std::move(picked), values_shape);
        }
        if (r.needs(0)) {
          if (depth == 0) {
            dx = zeros_like(b, g);
          } else {
            Primitive covered = widen(b.greater_equal_elem(std::move(owner), 0), addressed);
            dx = b.mask_fill(std::move(g), std::move(covered), 0);
          }
        }
        return {dx, dv};
      });
}

// ---- slices ----

Primitive AutodiffBackend::slice(Primitive x, ResolvedSlices slices) {
  const Shape shape = x->shape();
  return record<1>(
      "slice", Cost::Elementwise, {std::move(x)}, kKeepNone,
      [slices](Backend& b, Inputs<1> in) { return b.slice(std::move(in[0]), slices); },
      [slices, shape](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive zeros = b.zeros(shape, g->dtype(), g->device());
        if (g->shape().num_elements() == 0) return {zeros};
        return {b.slice_assign(std::move(zeros), slices, std::move(g))};
      });
}

Primitive AutodiffBackend::slice_assign(Primitive x, ResolvedSlices slices, Primitive values) {
  const Shape values_shape = values->shape();
  return record<2>(
      "slice_assign", Cost::Stored, {std::move(x), std::move(values)}, kKeepNone,
      [slices](Backend& b, Inputs<2> in) {
        return b.slice_assign(std::move(in[0]), slices, std::move(in[1]));
      },
      [slices, values_shape](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive dx, dv;
        if (r.needs(1)) dv = reduce_to(b, b.slice(g, slices), values_shape);
        if (r.needs(0)) {
          detail::DimVector region(slices.size());
          for (std::size_t d = 0; d < slices.size(); ++d) region[d] = slices[d].length;
          const Shape region_shape(std::move(region));
          dx = region_shape.num_elements() == 0
                   ? g
                   : b.slice_assign(g, slices, b.zeros(region_shape, g->dtype(), g->device()));
        }
        return {dx, dv};
      });
}

// ---- masks ----

// where(mask, values, x): each side gets g where it was taken, summed over its broadcast dims.
Primitive AutodiffBackend::mask_where(Primitive x, Primitive mask, Primitive values) {
  const Shape x_shape = x->shape();
  const Shape values_shape = values->shape();
  Primitive m = inner_of(mask);
  return record<2>(
      "mask_where", Cost::Elementwise, {std::move(x), std::move(values)}, kKeepNone,
      [m](Backend& b, Inputs<2> in) { return b.mask_where(std::move(in[0]), m, std::move(in[1])); },
      [m, x_shape, values_shape](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive dx, dv;
        if (r.needs(1)) dv = reduce_to(b, b.mask_fill(g, b.logical_not(m), 0), values_shape);
        if (r.needs(0)) dx = reduce_to(b, b.mask_fill(std::move(g), m, 0), x_shape);
        return {dx, dv};
      });
}

Primitive AutodiffBackend::mask_fill(Primitive x, Primitive mask, Scalar value) {
  const Shape shape = x->shape();
  Primitive m = inner_of(mask);
  return record<1>(
      "mask_fill", Cost::Elementwise, {std::move(x)}, kKeepNone,
      [m, value](Backend& b, Inputs<1> in) { return b.mask_fill(std::move(in[0]), m, value); },
      [m, shape](BackwardArgs& r, Primitive g) -> Grads {
        return {reduce_to(r.b, r.b.mask_fill(std::move(g), m, 0), shape)};
      });
}

// The selected elements come out in row-major order, so element p of the broadcast shape (when
// selected) is element (number of selected elements before p) of the output: a running count
// of the mask finds it, without reading the mask to the host.
Primitive AutodiffBackend::mask_select(Primitive x, Primitive mask) {
  const Shape x_shape = x->shape();
  Primitive m = inner_of(mask);
  return record<1>(
      "mask_select", Cost::Stored, {std::move(x)}, kKeepNone,
      [m](Backend& b, Inputs<1> in) { return b.mask_select(std::move(in[0]), m); },
      [m, x_shape](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        if (g->shape()[0] == 0) return {b.zeros(x_shape, g->dtype(), g->device())};
        const Shape shape = defaults::broadcast(x_shape, m->shape());
        const std::int64_t n = shape.num_elements();
        Primitive flat = b.reshape(defaults::expand_to(b, m, shape), Shape{n});
        Primitive before = b.sub_scalar(b.cumsum(b.cast(flat, DType::I64), 0), 1);
        Primitive spread = b.select(std::move(g), 0, b.clamp_min(std::move(before), 0));
        spread = b.mask_fill(std::move(spread), b.logical_not(std::move(flat)), 0);
        return {reduce_to(b, b.reshape(std::move(spread), shape), x_shape)};
      });
}

}  // namespace kiln::autodiff
