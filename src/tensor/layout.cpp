// Layout ops: reshape, expand, permute, flip, squeeze/unsqueeze, flatten, slice, unfold.
#include <algorithm>

#include "core/checked.h"
#include "tensor/common.h"

namespace kiln::detail {

Primitive reshape(Primitive x, Shape shape, std::size_t expected_rank) {
  check_any_kind(x, "reshape");
  const char* op = "reshape";
  if (shape.rank() != expected_rank) {
    fail<ShapeMismatch>(op, "target shape ", shape.to_string(), " has rank ", shape.rank(),
                        ", expected ", expected_rank);
  }
  // At most one -1, inferred from the element count.
  std::size_t inferred = shape.rank();
  for (std::size_t i = 0; i < shape.rank(); ++i) {
    if (shape[i] == -1) {
      if (inferred != shape.rank())
        fail<InvalidArgument>(op, "more than one -1 in ", shape.to_string());
      inferred = i;
    } else if (shape[i] < 0) {
      fail<InvalidArgument>(op, "negative dimension in ", shape.to_string());
    }
  }
  const std::int64_t total = x->shape().num_elements();
  if (inferred != shape.rank()) {
    Shape known_dims = shape;
    known_dims[inferred] = 1;
    const std::int64_t known = checked::num_elements(known_dims, op);
    if (known == 0 || total % known != 0) {
      fail<ShapeMismatch>(op, "cannot infer -1 in ", shape.to_string(), " for ", total,
                          " elements");
    }
    shape[inferred] = total / known;
  }
  // Checked even when it matches: [0] must not reshape to [2^32, 2^32], whose count wraps.
  const std::int64_t known = checked::num_elements(shape, op);
  if (known != total) {
    fail<ShapeMismatch>(op, "cannot reshape ", x->shape().to_string(), " (", total,
                        " elements) to ", shape.to_string(), " (", known, " elements)");
  }
  return backend_of(x).reshape(std::move(x), std::move(shape));
}

Primitive expand(Primitive x, Shape shape) {
  check_any_kind(x, "expand");
  const Shape& from = x->shape();
  if (shape.rank() < from.rank()) {
    fail<ShapeMismatch>("expand", "cannot expand ", from.to_string(), " to the lower rank ",
                        shape.to_string());
  }
  const std::size_t lead = shape.rank() - from.rank();
  for (std::size_t i = 0; i < shape.rank(); ++i) {
    if (i >= lead && shape[i] == -1) shape[i] = from[i - lead];
    const std::int64_t f = i < lead ? 1 : from[i - lead];
    if (shape[i] < 0 || (f != 1 && f != shape[i])) {
      fail<ShapeMismatch>("expand", "cannot expand ", from.to_string(), " to ", shape.to_string(),
                          " (dim ", i, ")");
    }
  }
  checked::check_shape(shape, "expand");
  return backend_of(x).expand(std::move(x), std::move(shape));
}

Primitive permute(Primitive x, std::vector<std::int64_t> axes) {
  const std::size_t rank = x->rank();
  if (axes.size() != rank) {
    fail<InvalidArgument>("permute", axes.size(), " axes given for rank ", rank);
  }
  std::vector<bool> seen(rank, false);
  for (std::int64_t& a : axes) {
    a = normalize_dim(a, rank, "permute");
    if (seen[static_cast<std::size_t>(a)])
      fail<InvalidArgument>("permute", "axis ", a, " repeated");
    seen[static_cast<std::size_t>(a)] = true;
  }
  return backend_of(x).permute(std::move(x), std::move(axes));
}

Primitive swap_dims(Primitive x, std::int64_t dim1, std::int64_t dim2) {
  dim1 = normalize_dim(dim1, x->rank(), "swap_dims");
  dim2 = normalize_dim(dim2, x->rank(), "swap_dims");
  if (dim1 == dim2) return x;
  return backend_of(x).swap_dims(std::move(x), dim1, dim2);
}

Primitive transpose(Primitive x) {
  const std::int64_t rank = static_cast<std::int64_t>(x->rank());
  if (rank < 2) return x;
  return swap_dims(std::move(x), rank - 2, rank - 1);
}

Primitive flip(Primitive x, std::vector<std::int64_t> axes) {
  check_any_kind(x, "flip");
  std::vector<bool> seen(x->rank(), false);
  for (std::int64_t& a : axes) {
    a = normalize_dim(a, x->rank(), "flip");
    if (seen[static_cast<std::size_t>(a)]) fail<InvalidArgument>("flip", "axis ", a, " repeated");
    seen[static_cast<std::size_t>(a)] = true;
  }
  if (axes.empty()) return x;
  return backend_of(x).flip(std::move(x), std::move(axes));
}

Primitive squeeze(Primitive x, std::int64_t dim) {
  check_any_kind(x, "squeeze");
  dim = normalize_dim(dim, x->rank(), "squeeze");
  const Shape& from = x->shape();
  if (from[static_cast<std::size_t>(dim)] != 1) {
    fail<ShapeMismatch>("squeeze", "dim ", dim, " of ", from.to_string(), " has size ",
                        from[static_cast<std::size_t>(dim)], ", not 1");
  }
  DimVector dims(from.vector());
  dims.erase(static_cast<std::size_t>(dim));
  return backend_of(x).reshape(std::move(x), Shape(std::move(dims)));
}

Primitive squeeze_all(Primitive x, std::size_t expected_rank) {
  check_any_kind(x, "squeeze_all");
  DimVector dims;
  for (std::int64_t d : x->shape().dims()) {
    if (d != 1) dims.push_back(d);
  }
  while (dims.size() < expected_rank) dims.insert(0, 1);
  if (dims.size() != expected_rank) {
    fail<ShapeMismatch>("squeeze_all", "squeezing ", x->shape().to_string(), " leaves rank ",
                        dims.size(), ", expected ", expected_rank);
  }
  return backend_of(x).reshape(std::move(x), Shape(std::move(dims)));
}

Primitive unsqueeze(Primitive x, std::int64_t dim) {
  check_any_kind(x, "unsqueeze");
  dim = normalize_dim(dim, x->rank() + 1, "unsqueeze");
  DimVector dims(x->shape().vector());
  dims.insert(static_cast<std::size_t>(dim), 1);
  return backend_of(x).reshape(std::move(x), Shape(std::move(dims)));
}

Primitive flatten(Primitive x, std::int64_t start_dim, std::int64_t end_dim) {
  check_any_kind(x, "flatten");
  start_dim = normalize_dim(start_dim, x->rank(), "flatten");
  end_dim = normalize_dim(end_dim, x->rank(), "flatten");
  if (start_dim > end_dim) {
    fail<InvalidArgument>("flatten", "start dim ", start_dim, " is after end dim ", end_dim);
  }
  DimVector dims;
  const Shape& from = x->shape();
  for (std::int64_t i = 0; i < start_dim; ++i) dims.push_back(from[static_cast<std::size_t>(i)]);
  std::int64_t merged = 1;
  for (std::int64_t i = start_dim; i <= end_dim; ++i) merged *= from[static_cast<std::size_t>(i)];
  dims.push_back(merged);
  for (std::size_t i = static_cast<std::size_t>(end_dim) + 1; i < from.rank(); ++i) {
    dims.push_back(from[i]);
  }
  return backend_of(x).reshape(std::move(x), Shape(std::move(dims)));
}

// slice and narrow take a QFloat tensor as it is: whole rows of its blocks are a view.
Primitive slice(Primitive x, const std::vector<Slice>& slices) {
  const Shape& shape = x->shape();
  if (slices.size() > shape.rank()) {
    fail<InvalidArgument>("slice", slices.size(), " slices given for rank ", shape.rank());
  }
  ResolvedSlices resolved(shape.rank());
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    resolved[d] = d < slices.size() ? resolve_slice(slices[d], shape[d], "slice")
                                    : ResolvedSlice{0, shape[d], 1};
  }
  return backend_of(x).slice(std::move(x), std::move(resolved));
}

Primitive narrow(Primitive x, std::int64_t dim, std::int64_t start, std::int64_t length) {
  dim = normalize_dim(dim, x->rank(), "narrow");
  const std::int64_t size = x->shape()[static_cast<std::size_t>(dim)];
  if (start < 0) start += size;
  // Compared as length > size - start: start + length may not fit in int64.
  if (start < 0 || length < 0 || start > size || length > size - start) {
    fail<InvalidArgument>("narrow", "start ", start, " with length ", length, " is outside dim ",
                          dim, " of size ", size);
  }
  ResolvedSlices resolved(x->rank());
  for (std::size_t d = 0; d < x->rank(); ++d) resolved[d] = {0, x->shape()[d], 1};
  resolved[static_cast<std::size_t>(dim)] = {length == 0 ? 0 : start, length, 1};
  return backend_of(x).slice(std::move(x), std::move(resolved));
}

Primitive unfold(Primitive x, std::int64_t dim, std::int64_t size, std::int64_t step) {
  check_any_kind(x, "unfold");
  dim = normalize_dim(dim, x->rank(), "unfold");
  if (size <= 0 || step <= 0) {
    fail<InvalidArgument>("unfold", "size ", size, " and step ", step, " must be positive");
  }
  if (size > x->shape()[static_cast<std::size_t>(dim)]) {
    fail<ShapeMismatch>("unfold", "window ", size, " is larger than dim ", dim, " of ",
                        x->shape().to_string());
  }
  // The windows overlap when step < size, so the view may have more elements than x: it must
  // stay inside the element limit like any other shape.
  detail::DimVector dims(x->shape().vector());
  dims[static_cast<std::size_t>(dim)] = (dims[static_cast<std::size_t>(dim)] - size) / step + 1;
  dims.push_back(size);
  checked::check_shape(Shape(std::move(dims)), "unfold");
  return backend_of(x).unfold(std::move(x), dim, size, step);
}

}  // namespace kiln::detail
