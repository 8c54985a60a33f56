// The reductions of form MANUAL: var, norm, argmax/argmin, max/min with indices, any/all (sum,
// prod, max, min, mean and the scans are generated from ops.def in generated.cpp). Full
// reductions give shape [1]; reductions along a dim keep it with size 1.
#include <cmath>
#include <limits>

#include "tensor/common.h"

namespace kiln::detail {

namespace {

std::int64_t dim_size(const Primitive& x, std::int64_t dim) {
  return x->shape()[static_cast<std::size_t>(dim)];
}

DType index_dtype(const Primitive& x) { return default_dtype(x->device(), Kind::Int); }

}  // namespace

// ---- var, norm ----

// sum((x - mean)^2) / (n - correction); a divisor <= 0 gives inf or NaN, as in PyTorch.
Primitive var_dim(Primitive x, std::int64_t dim, std::int64_t correction) {
  const char* op = "var";
  check_float(x, op);
  dim = normalize_dim(dim, x->rank(), op);
  Backend& backend = backend_of(x);
  const std::int64_t n = dim_size(x, dim);
  Primitive mean = backend.mean_dim(x, dim);
  Primitive centered = backend.sub(std::move(x), std::move(mean));
  Primitive squares = backend.sum_dim(backend.square(std::move(centered)), dim);
  const double divisor = static_cast<double>(std::max<std::int64_t>(0, n - correction));
  return backend.div_scalar(std::move(squares), Scalar(divisor));
}

namespace {

// The p-norm of x, reduced by sum_of / max_of / min_of (full or along a dim). 16-bit floats
// are computed in f32 so that squares and powers do not overflow, then converted back.
template <class Sum, class Max, class Min>
Primitive norm_impl(Primitive x, double p, const char* op, Sum sum_of, Max max_of, Min min_of) {
  if (std::isnan(p)) fail<InvalidArgument>(op, "p must be a number, got NaN");
  Backend& backend = backend_of(x);
  const DType dtype = x->dtype();
  const bool widen = dtype == DType::F16 || dtype == DType::BF16;
  if (widen) x = backend.cast(std::move(x), DType::F32);
  const DType work = x->dtype();
  Primitive result;
  if (p == 2.0) {
    result = backend.sqrt(sum_of(backend.square(std::move(x))));
  } else if (p == 1.0) {
    result = sum_of(backend.abs(std::move(x)));
  } else if (std::isinf(p)) {
    result = p > 0 ? max_of(backend.abs(std::move(x))) : min_of(backend.abs(std::move(x)));
  } else if (p == 0.0) {
    result = sum_of(backend.cast(backend.not_equal_elem(std::move(x), Scalar(0.0)), work));
  } else {
    Primitive powered = backend.pow_scalar(backend.abs(std::move(x)), Scalar(p));
    result = backend.pow_scalar(sum_of(std::move(powered)), Scalar(1.0 / p));
  }
  if (widen) result = backend.cast(std::move(result), dtype);
  return result;
}

}  // namespace

Primitive norm(Primitive x, double p) {
  const char* op = "norm";
  check_float(x, op);
  if (std::isinf(p)) check_not_empty(x, op);
  Backend& backend = backend_of(x);
  return norm_impl(
      std::move(x), p, op, [&](Primitive v) { return backend.sum(std::move(v)); },
      [&](Primitive v) { return backend.max(std::move(v)); },
      [&](Primitive v) { return backend.min(std::move(v)); });
}

Primitive norm_dim(Primitive x, double p, std::int64_t dim) {
  const char* op = "norm_dim";
  check_float(x, op);
  dim = normalize_dim(dim, x->rank(), op);
  if (std::isinf(p)) check_dim_not_empty(x, dim, op);
  Backend& backend = backend_of(x);
  return norm_impl(
      std::move(x), p, op, [&](Primitive v) { return backend.sum_dim(std::move(v), dim); },
      [&](Primitive v) { return backend.max_dim(std::move(v), dim); },
      [&](Primitive v) { return backend.min_dim(std::move(v), dim); });
}

// ---- positions of extrema ----

Primitive argmax(Primitive x, std::int64_t dim) {
  check_numeric(x, "argmax");
  dim = normalize_dim(dim, x->rank(), "argmax");
  check_dim_not_empty(x, dim, "argmax");
  const DType index = index_dtype(x);
  return backend_of(x).argmax(std::move(x), dim, index);
}
Primitive argmin(Primitive x, std::int64_t dim) {
  check_numeric(x, "argmin");
  dim = normalize_dim(dim, x->rank(), "argmin");
  check_dim_not_empty(x, dim, "argmin");
  const DType index = index_dtype(x);
  return backend_of(x).argmin(std::move(x), dim, index);
}
PrimPair max_dim_with_indices(Primitive x, std::int64_t dim) {
  const char* op = "max_dim_with_indices";
  check_numeric(x, op);
  dim = normalize_dim(dim, x->rank(), op);
  check_dim_not_empty(x, dim, op);
  const DType index = index_dtype(x);
  return backend_of(x).max_dim_with_indices(std::move(x), dim, index);
}
PrimPair min_dim_with_indices(Primitive x, std::int64_t dim) {
  const char* op = "min_dim_with_indices";
  check_numeric(x, op);
  dim = normalize_dim(dim, x->rank(), op);
  check_dim_not_empty(x, dim, op);
  const DType index = index_dtype(x);
  return backend_of(x).min_dim_with_indices(std::move(x), dim, index);
}

// ---- any, all (every kind: "x != 0") ----

Primitive any(Primitive x) {
  check_any_kind(x, "any");
  return backend_of(x).any(std::move(x));
}
Primitive all(Primitive x) {
  check_any_kind(x, "all");
  return backend_of(x).all(std::move(x));
}
Primitive any_dim(Primitive x, std::int64_t dim) {
  check_any_kind(x, "any_dim");
  dim = normalize_dim(dim, x->rank(), "any_dim");
  return backend_of(x).any_dim(std::move(x), dim);
}
Primitive all_dim(Primitive x, std::int64_t dim) {
  check_any_kind(x, "all_dim");
  dim = normalize_dim(dim, x->rank(), "all_dim");
  return backend_of(x).all_dim(std::move(x), dim);
}

}  // namespace kiln::detail
