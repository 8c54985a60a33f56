// The CPU backend's QFloat primitive: quant_view::QuantTensor (the blocks of a scheme seen
// through a permutation of their dims) on CpuStorage, and the QFloat paths of the CPU backend.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "backends/cpu/allocator.h"
#include "contract/backend.h"
#include "contract/quant_view.h"

namespace kiln::cpu {

class CpuQuantTensor final : public quant_view::QuantTensor<CpuStorage> {
 public:
  // The blocks of `stored` from byte `offset` of blocks, viewed with dim i showing dim axes[i]
  // of stored.
  CpuQuantTensor(QuantScheme scheme, const Shape& stored, Axes axes,
                 std::shared_ptr<CpuStorage> blocks, std::int64_t offset = 0)
      : QuantTensor(scheme, stored, std::move(axes), Device::cpu(), std::move(blocks), offset) {}
  // Fresh blocks of shape, in stored order.
  CpuQuantTensor(QuantScheme scheme, const Shape& shape, std::shared_ptr<CpuStorage> blocks)
      : CpuQuantTensor(scheme, shape, identity(shape.rank()), std::move(blocks)) {}

  const std::byte* blocks() const noexcept { return blocks_->data() + offset_; }
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
