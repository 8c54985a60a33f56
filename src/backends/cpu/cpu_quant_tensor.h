// The CPU backend's QFloat primitive: the raw blocks of a QuantScheme on CpuStorage from a byte
// offset, row-major over `stored` (blocks along its last dim, as TensorData::quantized holds
// them), seen through a permutation of its dims. permute and swap_dims make views of the same
// blocks in O(1), so that `x.matmul(w.transpose())` reaches the product with the weight still
// quantized, and so does a slice of whole rows along the first dim (a fused qkv weight's
// parts); every other op sees the tensor dequantized (the tensor layer's rule, tensor/common.h).
#pragma once

#include <memory>
#include <vector>

#include "backends/cpu/allocator.h"
#include "contract/backend.h"
#include "contract/quant_view.h"

namespace kiln::cpu {

class CpuQuantTensor final : public TensorPrimitive {
 public:
  // The blocks of `stored` from byte `offset` of blocks, viewed with dim i showing dim axes[i]
  // of stored (cpu_quant.cpp).
  CpuQuantTensor(QuantScheme scheme, const Shape& stored, Axes axes,
                 std::shared_ptr<CpuStorage> blocks, std::int64_t offset = 0);
  // Fresh blocks of shape, in stored order.
  CpuQuantTensor(QuantScheme scheme, const Shape& shape, std::shared_ptr<CpuStorage> blocks);

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
  const std::shared_ptr<CpuStorage>& storage() const noexcept { return blocks_; }
  const std::byte* blocks() const noexcept { return blocks_->data() + offset_; }
  std::int64_t offset() const noexcept { return offset_; }

  static Axes identity(std::size_t rank) { return quant_view::identity(rank); }

 private:
  QuantScheme scheme_;
  Shape stored_;
  Axes axes_;
  std::shared_ptr<CpuStorage> blocks_;
  std::int64_t offset_;
};

inline const CpuQuantTensor& as_quantized(const Primitive& p) noexcept {
  return static_cast<const CpuQuantTensor&>(*p);
}

// from_data and into_data of QFloat data (cpu_quant.cpp): the blocks copied as they are. A view
// whose blocks no longer run along its last dim reads back dequantized, as f32.
Primitive quantized_from_data(const TensorData& data);
TensorData quantized_into_data(Backend& backend, const Primitive& x);

// dst's blocks take src's (CpuBackend::assign of a QFloat tensor: a capture's replay writing a
// quantize's result again): both of one scheme, stored shape and view (UnsupportedDType
// otherwise; the tensor layer writes no QFloat tensor in place itself).
void assign_quantized(const Primitive& dst, const Primitive& src);

// x [..., k] @ weight (+ bias [n]) for a QFloat matrix weight viewed [k, n]
// (cpu_quant_product.cpp): matmul's and linear's product in x's dtype, computed in f32 on the
// blocks.
Primitive quantized_product(Backend& backend, Primitive x, const Primitive& weight,
                            OptionalPrimitive bias);
// embedding from a QFloat table [rows, width] in stored order: the rows index names (checked,
// in indices' row-major order, whose shape is indices_shape), decoded to f32; the rest of the
// table stays as it is.
Primitive quantized_rows(const CpuQuantTensor& table, const std::vector<std::int64_t>& index,
                         const Shape& indices_shape);

}  // namespace kiln::cpu
