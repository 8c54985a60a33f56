// The view arithmetic of the backends' QFloat tensors (the CPU's and cuda's): the blocks of a
// `stored` shape (row-major, blocks along its last dim) seen through a permutation of its dims,
// dim i of the view showing dim axes[i] of stored. permute composes permutations; a slice of
// whole rows along the first dim of a view in stored order is a range of the blocks. QuantTensor
// is the state the backends' QFloat primitives share, over their own storage.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

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

// A backend's QFloat primitive: the raw blocks of a QuantScheme in StorageT from a byte offset,
// row-major over `stored` (blocks along its last dim, as TensorData::quantized holds them), seen
// with dim i showing dim axes[i] of stored. permute and swap_dims make views of the same blocks
// in O(1), so `x.matmul(w.transpose())` reaches the product with the weight still quantized, and
// so does a slice of whole rows along the first dim (a fused qkv weight's parts); every other op
// sees the tensor dequantized (the tensor layer's rule, tensor/common.h).
template <class StorageT>
class QuantTensor : public TensorPrimitive {
 public:
  bool storage_unique() const noexcept override { return blocks_.use_count() == 1; }
  const QuantScheme* quant_scheme() const noexcept override { return &scheme_; }

  const QuantScheme& scheme() const noexcept { return scheme_; }
  // The shape the blocks encode, row-major, blocks along its last dim.
  const Shape& stored_shape() const noexcept { return stored_; }
  const Axes& axes() const noexcept { return axes_; }
  // True when the view is the stored shape itself (no dim moved).
  bool in_stored_order() const noexcept { return quant_view::in_stored_order(axes_); }
  // True for [cols, rows] over stored [rows, cols]: a weight's transpose, whose blocks run along
  // a product's inner dim.
  bool is_transposed_matrix() const noexcept {
    return axes_.size() == 2 && axes_[0] == 1 && axes_[1] == 0;
  }
  const std::shared_ptr<StorageT>& storage() const noexcept { return blocks_; }
  std::int64_t offset() const noexcept { return offset_; }

  static Axes identity(std::size_t rank) { return quant_view::identity(rank); }

 protected:
  QuantTensor(QuantScheme scheme, const Shape& stored, Axes axes, Device device,
              std::shared_ptr<StorageT> blocks, std::int64_t offset)
      : TensorPrimitive(DType::QFloat, stored, std::move(device)),
        scheme_(scheme),
        stored_(stored),
        axes_(std::move(axes)),
        blocks_(std::move(blocks)),
        offset_(offset) {
    for (std::size_t i = 0; i < axes_.size(); ++i) {
      shape_[i] = stored[static_cast<std::size_t>(axes_[i])];
    }
  }

  QuantScheme scheme_;
  Shape stored_;
  Axes axes_;
  std::shared_ptr<StorageT> blocks_;
  std::int64_t offset_;
};

}  // namespace kiln::quant_view
