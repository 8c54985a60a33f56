// Small building blocks for default ops: constants shaped to broadcast, slices along one dim,
// and the compute dtype that 16-bit floats are widened to. Every helper calls ops on the given
// Backend (virtually), so a decorator or a faster override is used when present.
#pragma once

#include <cstdint>
#include <limits>

#include "contract/backend.h"

namespace kiln::defaults {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

// A shape of rank `rank` with every dim 1: a constant of this shape broadcasts against anything.
inline Shape ones_shape(std::size_t rank) { return Shape(detail::DimVector(rank, 1)); }

// shape with dims[dim] replaced by size.
inline Shape with_dim(const Shape& shape, std::int64_t dim, std::int64_t size) {
  Shape out = shape;
  out[static_cast<std::size_t>(dim)] = size;
  return out;
}

// A constant of x's rank (all dims 1), dtype and device, that broadcasts against x.
inline Primitive constant_like(Backend& b, const Primitive& x, Scalar value,
                               std::optional<DType> dtype = std::nullopt) {
  return b.full(ones_shape(x->rank()), value, dtype.value_or(x->dtype()), x->device());
}

// The whole of every dim of shape.
inline ResolvedSlices full_slices(const Shape& shape) {
  ResolvedSlices slices(shape.rank());
  for (std::size_t d = 0; d < shape.rank(); ++d) slices[d] = {0, shape[d], 1};
  return slices;
}

// x[..., start : start + length * step : step, ...] along dim.
inline Primitive slice_dim(Backend& b, Primitive x, std::int64_t dim, std::int64_t start,
                           std::int64_t length, std::int64_t step = 1) {
  ResolvedSlices slices = full_slices(x->shape());
  slices[static_cast<std::size_t>(dim)] = {length > 0 ? start : 0, length, step};
  return b.slice(std::move(x), std::move(slices));
}

// x viewed at shape (same rank, broadcasting dims of size 1); x itself when already there.
inline Primitive expand_to(Backend& b, Primitive x, const Shape& shape) {
  if (x->shape() == shape) return x;
  return b.expand(std::move(x), shape);
}

// The gradient of a broadcast operand: g summed over the dims where shape has size 1.
inline Primitive reduce_to(Backend& b, Primitive g, const Shape& shape) {
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1 && g->shape()[d] != 1)
      g = b.sum_dim(std::move(g), static_cast<std::int64_t>(d));
  }
  return g;
}

// The broadcast of two shapes of equal rank (the tensor layer has checked they broadcast).
inline Shape broadcast(const Shape& a, const Shape& b) {
  Shape out = a;
  for (std::size_t d = 0; d < a.rank(); ++d) out[d] = a[d] == 1 ? b[d] : a[d];
  return out;
}

// 16-bit floats compute in f32, as the CPU kernels do; other dtypes in themselves.
inline DType compute_dtype(DType dtype) {
  return dtype == DType::F16 || dtype == DType::BF16 ? DType::F32 : dtype;
}
inline Primitive to_compute(Backend& b, Primitive x) {
  const DType target = compute_dtype(x->dtype());
  return x->dtype() == target ? x : b.cast(std::move(x), target);
}
inline Primitive from_compute(Backend& b, Primitive x, DType dtype) {
  return x->dtype() == dtype ? x : b.cast(std::move(x), dtype);
}

}  // namespace kiln::defaults
