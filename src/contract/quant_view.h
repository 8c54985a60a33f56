// The view arithmetic of the backends' QFloat tensors (the CPU's and cuda's): the blocks of a
// `stored` shape (row-major, blocks along its last dim) seen through a permutation of its dims,
// dim i of the view showing dim axes[i] of stored. permute composes permutations; a slice of
// whole rows along the first dim of a view in stored order is a range of the blocks.
#pragma once

#include <cstdint>

#include "contract/backend.h"

namespace kiln::quant_view {

inline Axes identity(std::size_t rank) {
  Axes axes(rank);
  for (std::size_t i = 0; i < rank; ++i) axes[i] = static_cast<std::int64_t>(i);
  return axes;
}

inline bool in_stored_order(const Axes& axes) noexcept {
  for (std::size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] != static_cast<std::int64_t>(i)) return false;
  }
  return true;
}

// The axes of view.permute(axes): its dim i shows dim axes[i] of the view, which shows dim
// view_axes[axes[i]] of stored.
inline Axes permuted(const Axes& view_axes, Axes axes) {
  for (std::int64_t& a : axes) a = view_axes[static_cast<std::size_t>(a)];
  return axes;
}

// Whether slices of a view (axes over stored) take whole rows along stored's first dim, a
// contiguous range of its blocks.
inline bool whole_rows(const Axes& axes, const Shape& stored, const ResolvedSlices& slices) {
  bool rows = in_stored_order(axes) && slices[0].step == 1;
  for (std::size_t d = 1; d < slices.size(); ++d) {
    rows = rows && slices[d].start == 0 && slices[d].step == 1 && slices[d].length == stored[d];
  }
  return rows;
}

}  // namespace kiln::quant_view
