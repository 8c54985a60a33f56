// Defaults of reductions. Full reductions flatten and reduce along dim 0; prod is a log-depth
// tree of multiplications (exact for negatives and zeros, unlike exp(sum(log))); any/all reduce
// the truth values with max/min over u8.
#include "contract/defaults/compose.h"

namespace kiln {

using namespace defaults;

namespace {

Primitive flatten(Backend& b, Primitive x) {
  const std::int64_t n = x->shape().num_elements();
  return b.reshape(std::move(x), Shape{n});
}

}  // namespace

Primitive Backend::sum(Primitive x) { return sum_dim(flatten(*this, std::move(x)), 0); }

Primitive Backend::mean(Primitive x) { return mean_dim(flatten(*this, std::move(x)), 0); }

Primitive Backend::mean_dim(Primitive x, std::int64_t dim) {
  // 16-bit floats sum in f32, so a large count of moderate values cannot overflow the sum.
  const DType dtype = x->dtype();
  const std::int64_t count = x->shape()[static_cast<std::size_t>(dim)];
  Primitive total = sum_dim(to_compute(*this, std::move(x)), dim);
  return from_compute(*this, div_scalar(std::move(total), static_cast<double>(count)), dtype);
}

Primitive Backend::prod(Primitive x) { return prod_dim(flatten(*this, std::move(x)), 0); }

Primitive Backend::prod_dim(Primitive x, std::int64_t dim) {
  const DType dtype = x->dtype();
  std::int64_t size = x->shape()[static_cast<std::size_t>(dim)];
  if (size == 0) return ones(with_dim(x->shape(), dim, 1), dtype, x->device());
  x = to_compute(*this, std::move(x));
  // Multiply the first half by the second; an odd element out is carried to the next round.
  while (size > 1) {
    const std::int64_t half = size / 2;
    Primitive product =
        mul(slice_dim(*this, x, dim, 0, half), slice_dim(*this, x, dim, half, half));
    if (size % 2 == 1) {
      product = cat({std::move(product), slice_dim(*this, x, dim, size - 1, 1)}, dim);
    }
    x = std::move(product);
    size = x->shape()[static_cast<std::size_t>(dim)];
  }
  return from_compute(*this, std::move(x), dtype);
}

Primitive Backend::max(Primitive x) { return max_dim(flatten(*this, std::move(x)), 0); }

Primitive Backend::min(Primitive x) { return min_dim(flatten(*this, std::move(x)), 0); }

PrimitivePair Backend::max_dim_with_indices(Primitive x, std::int64_t dim, DType index_dtype) {
  Primitive indices = argmax(x, dim, index_dtype);
  return {max_dim(std::move(x), dim), std::move(indices)};
}

PrimitivePair Backend::min_dim_with_indices(Primitive x, std::int64_t dim, DType index_dtype) {
  Primitive indices = argmin(x, dim, index_dtype);
  return {min_dim(std::move(x), dim), std::move(indices)};
}

namespace {

// any (largest = true) or all along dim: the truth values (x != 0; NaN counts as true) as u8,
// reduced with max or min. Over an empty dim any is false and all is true.
Primitive truth_reduce(Backend& b, Primitive x, std::int64_t dim, bool any) {
  const Shape out_shape = with_dim(x->shape(), dim, 1);
  if (x->shape()[static_cast<std::size_t>(dim)] == 0) {
    return b.full(out_shape, !any, DType::Bool, x->device());
  }
  Primitive truth = x->dtype() == DType::Bool ? std::move(x) : b.cast(std::move(x), DType::Bool);
  Primitive bytes = b.cast(std::move(truth), DType::U8);
  Primitive reduced = any ? b.max_dim(std::move(bytes), dim) : b.min_dim(std::move(bytes), dim);
  return b.cast(std::move(reduced), DType::Bool);
}

}  // namespace

Primitive Backend::any_dim(Primitive x, std::int64_t dim) {
  return truth_reduce(*this, std::move(x), dim, true);
}

Primitive Backend::all_dim(Primitive x, std::int64_t dim) {
  return truth_reduce(*this, std::move(x), dim, false);
}

Primitive Backend::any(Primitive x) { return any_dim(flatten(*this, std::move(x)), 0); }

Primitive Backend::all(Primitive x) { return all_dim(flatten(*this, std::move(x)), 0); }

}  // namespace kiln
