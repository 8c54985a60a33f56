// The geometry of strided tensors, shared by the backends whose tensors are windows (shape,
// strides in elements, offset) on shared storage: the CPU and CUDA backends. Contiguity,
// broadcasting, and the layout ops that are O(1) views (reshape when the strides allow it,
// permute, flip, unfold, slice) are the same arithmetic on every such backend; only the storage
// differs.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "kiln/options.h"
#include "kiln/shape.h"

namespace kiln::strided {

using Strides = detail::DimVector;

// Where a view's elements are: element (i0, i1, ...) sits at offset + sum(i_d * strides[d]).
struct View {
  Shape shape;
  Strides strides;
  std::int64_t offset = 0;
};

// Row-major strides of shape.
Strides contiguous_strides(const Shape& shape);
// Row-major with no gaps (size-1 dims may have any stride).
bool is_contiguous(const Shape& shape, const Strides& strides) noexcept;
// The strides of (shape, strides) read as the broadcast shape `to` (0 along broadcast dims);
// shape's rank is at most to's.
Strides broadcast_strides(const Shape& shape, const Strides& strides, const Shape& to);
// The broadcast of two shapes, or ShapeMismatch naming op.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Strides that view the same memory with shape `to`, if the existing strides allow it (each
// group of old dims that merges into new dims must be contiguous within itself); else nullopt
// and the caller copies.
std::optional<Strides> reshape_strides(const Shape& shape, const Strides& strides, const Shape& to);

// Throws InvalidArgument naming op unless every element of the view (shape, strides, offset)
// lies in [0, storage_elements): the invariant that makes a view safe to read and write. O(rank).
void check_view_in_storage(const Shape& shape, const Strides& strides, std::int64_t offset,
                           std::int64_t storage_elements, const char* op);

// The O(1) layout ops on the view (shape, strides, offset); arguments are already checked by the
// tensor layer.
View permute(const Shape& shape, const Strides& strides, std::int64_t offset,
             std::span<const std::int64_t> axes);
View flip(const Shape& shape, const Strides& strides, std::int64_t offset,
          std::span<const std::int64_t> axes);
View unfold(const Shape& shape, const Strides& strides, std::int64_t offset, std::int64_t dim,
            std::int64_t size, std::int64_t step);
View slice(const Shape& shape, const Strides& strides, std::int64_t offset,
           std::span<const ResolvedSlice> slices);

}  // namespace kiln::strided
