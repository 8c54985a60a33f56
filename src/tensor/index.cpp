// Indexing ops: gather/scatter, select/select_assign, gather_nd/scatter_nd, slice_assign and
// slice_fill, mask ops and argwhere. Index values are range-checked by the backend as it reads
// them (reading them here would cost a device round trip).
#include <initializer_list>

#include "tensor/common.h"

namespace kiln::detail {

namespace {

// The backend that runs an op over several operands: all on the same hardware (DeviceMismatch
// naming both devices otherwise); a tracked operand makes the op tracked. The operands pass the
// kind check of ops that take every kind (a quantized one is dequantized).
Backend& backend_of_all(std::initializer_list<Primitive*> operands, const char* op) {
  for (Primitive* p : operands) check_any_kind(*p, op);
  const Primitive& first = **operands.begin();
  Device chosen = first->device();
  for (const Primitive* p : operands) {
    backend_of(first, *p, op);
    chosen = joined(chosen, (*p)->device());
  }
  return backend_for(chosen);
}

// values converted to the dtype of x (the result keeps x's dtype); DTypeMismatch across kinds.
void match_dtype(const Primitive& x, Primitive& values, const char* op) {
  const DType want = x->dtype();
  const DType have = values->dtype();
  if (have == want) return;
  if (kind_of(have) != kind_of(want)) {
    fail<DTypeMismatch>(op, "values of dtype ", dtype_name(have), " cannot be written into a ",
                        dtype_name(want), " tensor; convert them first");
  }
  values = backend_of(values).cast(std::move(values), want);
}

void check_same_rank(const Primitive& x, const Primitive& other, const char* what, const char* op) {
  if (other->rank() != x->rank()) {
    fail<ShapeMismatch>(op, what, " of shape ", other->shape().to_string(), " have rank ",
                        other->rank(), " but the tensor of shape ", x->shape().to_string(),
                        " has rank ", x->rank());
  }
}

// gather / scatter: indices no larger than x in every dim but dim (PyTorch's rule).
void check_index_extent(const Primitive& x, const Primitive& indices, std::int64_t dim,
                        const char* op) {
  for (std::size_t d = 0; d < x->rank(); ++d) {
    if (static_cast<std::int64_t>(d) != dim && indices->shape()[d] > x->shape()[d]) {
      fail<ShapeMismatch>(op, "indices of shape ", indices->shape().to_string(),
                          " are larger than the tensor of shape ", x->shape().to_string(),
                          " in dim ", d);
    }
  }
}

void check_shape(const Shape& actual, const Shape& expected, const char* what, const char* op) {
  if (actual != expected) {
    fail<ShapeMismatch>(op, what, " have shape ", actual.to_string(), ", expected ",
                        expected.to_string());
  }
}

// x's shape with dim set to size.
Shape with_dim(const Shape& shape, std::int64_t dim, std::int64_t size) {
  Shape out = shape;
  out[static_cast<std::size_t>(dim)] = size;
  return out;
}

// The [..., k] index matrix of gather_nd / scatter_nd: k must address dims of x. A single row
// addressing every dim of x becomes [1, k], so that its result has shape [1] (kiln has no
// rank-0 tensors).
std::int64_t prepare_nd_indices(const Primitive& x, Primitive& indices, const char* op) {
  check_int(indices, op);
  const Shape& shape = indices->shape();
  const std::int64_t k = shape[shape.rank() - 1];
  if (k > static_cast<std::int64_t>(x->rank())) {
    fail<ShapeMismatch>(op, "indices of shape ", shape.to_string(), " address ", k,
                        " dims but the tensor of shape ", x->shape().to_string(), " has rank ",
                        x->rank());
  }
  if (shape.rank() == 1 && k == static_cast<std::int64_t>(x->rank())) {
    indices = backend_of(indices).reshape(std::move(indices), Shape{1, k});
  }
  return k;
}

// The shape of gather_nd's result: indices' leading dims, then x's dims past the k addressed.
Shape nd_result_shape(const Primitive& x, const Primitive& indices, std::int64_t k) {
  DimVector dims;
  const Shape& shape = indices->shape();
  for (std::size_t i = 0; i + 1 < shape.rank(); ++i) dims.push_back(shape[i]);
  for (std::size_t i = static_cast<std::size_t>(k); i < x->rank(); ++i) {
    dims.push_back(x->shape()[i]);
  }
  return Shape(std::move(dims));
}

// The region a list of slices selects, resolved against x's shape.
ResolvedSlices resolve_all(const Shape& shape, const std::vector<Slice>& slices, const char* op) {
  if (slices.size() > shape.rank()) {
    fail<InvalidArgument>(op, slices.size(), " slices given for rank ", shape.rank());
  }
  ResolvedSlices resolved(shape.rank());
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    resolved[d] =
        d < slices.size() ? resolve_slice(slices[d], shape[d], op) : ResolvedSlice{0, shape[d], 1};
  }
  return resolved;
}

Shape region_shape(const ResolvedSlices& resolved) {
  DimVector dims(resolved.size());
  for (std::size_t d = 0; d < resolved.size(); ++d) dims[d] = resolved[d].length;
  return Shape(std::move(dims));
}

}  // namespace

Primitive gather(std::int64_t dim, Primitive x, Primitive indices) {
  const char* op = "gather";
  check_int(indices, op);
  Backend& backend = backend_of_all({&x, &indices}, op);
  check_same_rank(x, indices, "indices", op);
  dim = normalize_dim(dim, x->rank(), op);
  check_index_extent(x, indices, dim, op);
  return backend.gather(dim, std::move(x), std::move(indices));
}

Primitive scatter(std::int64_t dim, Primitive x, Primitive indices, Primitive values,
                  IndexingUpdate update) {
  const char* op = "scatter";
  check_int(indices, op);
  Backend& backend = backend_of_all({&x, &indices, &values}, op);
  match_dtype(x, values, op);
  check_same_rank(x, indices, "indices", op);
  dim = normalize_dim(dim, x->rank(), op);
  check_index_extent(x, indices, dim, op);
  check_shape(values->shape(), indices->shape(), "values", op);
  return backend.scatter(dim, std::move(x), std::move(indices), std::move(values), update);
}

Primitive select(Primitive x, std::int64_t dim, Primitive indices) {
  const char* op = "select";
  check_int(indices, op);
  Backend& backend = backend_of_all({&x, &indices}, op);
  if (indices->rank() != 1) {
    fail<ShapeMismatch>(op, "indices must have rank 1, got shape ", indices->shape().to_string());
  }
  dim = normalize_dim(dim, x->rank(), op);
  return backend.select(std::move(x), dim, std::move(indices));
}

Primitive select_assign(Primitive x, std::int64_t dim, Primitive indices, Primitive values,
                        IndexingUpdate update) {
  const char* op = "select_assign";
  check_int(indices, op);
  Backend& backend = backend_of_all({&x, &indices, &values}, op);
  match_dtype(x, values, op);
  if (indices->rank() != 1) {
    fail<ShapeMismatch>(op, "indices must have rank 1, got shape ", indices->shape().to_string());
  }
  dim = normalize_dim(dim, x->rank(), op);
  check_same_rank(x, values, "values", op);
  check_shape(values->shape(), with_dim(x->shape(), dim, indices->shape()[0]), "values", op);
  return backend.select_assign(std::move(x), dim, std::move(indices), std::move(values), update);
}

Primitive gather_nd(Primitive x, Primitive indices, std::size_t result_rank) {
  const char* op = "gather_nd";
  Backend& backend = backend_of_all({&x, &indices}, op);
  const std::int64_t k = prepare_nd_indices(x, indices, op);
  const Shape result = nd_result_shape(x, indices, k);
  if (result.rank() != result_rank) {
    fail<ShapeMismatch>(op, "indices of shape ", indices->shape().to_string(),
                        " into a tensor of shape ", x->shape().to_string(),
                        " give a result of rank ", result.rank(), ", expected rank ", result_rank);
  }
  return backend.gather_nd(std::move(x), std::move(indices));
}

Primitive scatter_nd(Primitive x, Primitive indices, Primitive values, IndexingUpdate update) {
  const char* op = "scatter_nd";
  Backend& backend = backend_of_all({&x, &indices, &values}, op);
  match_dtype(x, values, op);
  const std::int64_t k = prepare_nd_indices(x, indices, op);
  check_shape(values->shape(), nd_result_shape(x, indices, k), "values", op);
  return backend.scatter_nd(std::move(x), std::move(indices), std::move(values), update);
}

Primitive slice_assign(Primitive x, const std::vector<Slice>& slices, Primitive values) {
  const char* op = "slice_assign";
  Backend& backend = backend_of_all({&x, &values}, op);
  match_dtype(x, values, op);
  check_same_rank(x, values, "values", op);
  ResolvedSlices resolved = resolve_all(x->shape(), slices, op);
  const Shape region = region_shape(resolved);
  if (values->shape() != region) {
    // Values broadcast to the region (size-1 dims stretch).
    for (std::size_t d = 0; d < region.rank(); ++d) {
      if (values->shape()[d] != 1 && values->shape()[d] != region[d]) {
        fail<ShapeMismatch>(op, "values of shape ", values->shape().to_string(),
                            " do not fit the sliced region of shape ", region.to_string());
      }
    }
    values = backend_of(values).expand(std::move(values), region);
  }
  if (region.num_elements() == 0) return x;
  return backend.slice_assign(std::move(x), std::move(resolved), std::move(values));
}

Primitive slice_fill(Primitive x, const std::vector<Slice>& slices, Scalar value) {
  const char* op = "slice_fill";
  check_any_kind(x, op);
  check_scalar_fits(x, value, op);
  ResolvedSlices resolved = resolve_all(x->shape(), slices, op);
  const Shape region = region_shape(resolved);
  if (region.num_elements() == 0) return x;
  Backend& backend = backend_of(x);
  Primitive values = backend.full(region, value, x->dtype(), x->device());
  return backend.slice_assign(std::move(x), std::move(resolved), std::move(values));
}

Primitive mask_where(Primitive x, Primitive mask, Primitive values) {
  const char* op = "mask_where";
  check_bool(mask, op);
  Backend& backend = backend_of_all({&x, &mask, &values}, op);
  promote(x, values, op);
  broadcast_shape(broadcast_shape(x->shape(), mask->shape(), op), values->shape(), op);
  return backend.mask_where(std::move(x), std::move(mask), std::move(values));
}

Primitive mask_fill(Primitive x, Primitive mask, Scalar value) {
  const char* op = "mask_fill";
  check_bool(mask, op);
  check_scalar_fits(x, value, op);
  Backend& backend = backend_of_all({&x, &mask}, op);
  broadcast_shape(x->shape(), mask->shape(), op);
  return backend.mask_fill(std::move(x), std::move(mask), value);
}

Primitive mask_select(Primitive x, Primitive mask) {
  const char* op = "mask_select";
  check_bool(mask, op);
  Backend& backend = backend_of_all({&x, &mask}, op);
  broadcast_shape(x->shape(), mask->shape(), op);
  return backend.mask_select(std::move(x), std::move(mask));
}

Primitive argwhere(Primitive mask) {
  const char* op = "argwhere";
  check_bool(mask, op);
  const DType index_dtype = default_dtype(mask->device(), Kind::Int);
  return backend_of(mask).argwhere(std::move(mask), index_dtype);
}

}  // namespace kiln::detail
