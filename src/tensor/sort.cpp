// Sorting along a dim: sort, sort_with_indices, argsort, topk. Index results have the device's
// default int dtype.
#include "tensor/common.h"

namespace kiln::detail {

namespace {

DType index_dtype(const Primitive& x) { return default_dtype(x->device(), Kind::Int); }

}  // namespace

Primitive sort(Primitive x, std::int64_t dim, bool descending) {
  check_numeric(x, "sort");
  dim = normalize_dim(dim, x->rank(), "sort");
  return backend_of(x).sort(std::move(x), dim, descending);
}

PrimPair sort_with_indices(Primitive x, std::int64_t dim, bool descending) {
  const char* op = "sort_with_indices";
  check_numeric(x, op);
  dim = normalize_dim(dim, x->rank(), op);
  const DType index = index_dtype(x);
  return backend_of(x).sort_with_indices(std::move(x), dim, descending, index);
}

Primitive argsort(Primitive x, std::int64_t dim, bool descending) {
  check_numeric(x, "argsort");
  dim = normalize_dim(dim, x->rank(), "argsort");
  const DType index = index_dtype(x);
  return backend_of(x).argsort(std::move(x), dim, descending, index);
}

PrimPair topk_with_indices(Primitive x, std::int64_t k, std::int64_t dim, bool largest) {
  const char* op = "topk";
  check_numeric(x, op);
  dim = normalize_dim(dim, x->rank(), op);
  const std::int64_t size = x->shape()[static_cast<std::size_t>(dim)];
  if (k < 0 || k > size) {
    fail<InvalidArgument>(op, "k = ", k, " is out of range for dim ", dim, " of size ", size,
                          " (shape ", x->shape().to_string(), ")");
  }
  const DType index = index_dtype(x);
  return backend_of(x).topk_with_indices(std::move(x), k, dim, largest, index);
}

}  // namespace kiln::detail
