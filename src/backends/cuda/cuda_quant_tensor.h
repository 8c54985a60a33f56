// The CUDA backend's QFloat primitive, as the CPU's (backends/cpu/cpu_quant_tensor.h): the raw
// blocks of a QuantScheme in device storage from a byte offset, row-major over `stored` (blocks
// along its last dim, as TensorData::quantized holds them), seen through a permutation of its
// dims. permute and swap_dims make views of the same blocks in O(1), so `x.matmul(w.transpose())`
// reaches the product with the weight still quantized, and so does a slice of whole rows along
// the first dim; every other op sees the tensor dequantized (the tensor layer's rule).
#pragma once

#include <memory>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_tensor.h"
#include "contract/quant_view.h"

namespace kiln::cuda {

class CudaQuantTensor final : public TensorPrimitive {
 public:
  // The blocks of `stored` from byte `offset` of blocks, viewed with dim i showing dim axes[i]
  // of stored.
  CudaQuantTensor(QuantScheme scheme, const Shape& stored, Axes axes, Device device,
                  std::shared_ptr<Storage> blocks, std::int64_t offset);

  bool storage_unique() const noexcept override { return blocks_.use_count() == 1; }
  const QuantScheme* quant_scheme() const noexcept override { return &scheme_; }

  const QuantScheme& scheme() const noexcept { return scheme_; }
  // The shape the blocks encode, row-major, blocks along its last dim.
  const Shape& stored_shape() const noexcept { return stored_; }
  const Axes& axes() const noexcept { return axes_; }
  bool in_stored_order() const noexcept { return quant_view::in_stored_order(axes_); }
  // [cols, rows] over stored [rows, cols]: a weight's transpose, its blocks along a product's
  // inner dim.
  bool is_transposed_matrix() const noexcept {
    return axes_.size() == 2 && axes_[0] == 1 && axes_[1] == 0;
  }
  const std::shared_ptr<Storage>& storage() const noexcept { return blocks_; }
  std::int64_t offset() const noexcept { return offset_; }
  // Device address of the first block.
  CUdeviceptr blocks() const noexcept {
    return blocks_->pointer() + static_cast<CUdeviceptr>(offset_);
  }
  // Bytes of the blocks (quantized_bytes of the stored shape).
  std::size_t bytes() const;
  // Bytes of one row of the stored shape's last dim.
  std::int64_t row_bytes() const;

  static Axes identity(std::size_t rank) { return quant_view::identity(rank); }

 private:
  QuantScheme scheme_;
  Shape stored_;
  Axes axes_;
  std::shared_ptr<Storage> blocks_;
  std::int64_t offset_;
};

inline const CudaQuantTensor& as_quantized(const Primitive& p) noexcept {
  return static_cast<const CudaQuantTensor&>(*p);
}

// The blocks as a U8 tensor of bytes() elements on the same storage: copies and reads of them go
// through the backend's byte paths.
TensorPtr block_bytes(const CudaQuantTensor& q);

// Fresh blocks of scheme for stored (identity view) on backend's device; the bytes uninitialised.
std::shared_ptr<CudaQuantTensor> make_quantized(CudaBackend& backend, const QuantScheme& scheme,
                                                const Shape& stored, const char* op);

// An upload of QFloat data: its blocks, byte for byte (from_data).
Primitive quantized_from_data(CudaBackend& backend, const TensorData& data);

// x [..., k] @ weight (+ bias [n]) for a QFloat matrix weight viewed [k, n]: matmul's and linear's
// product, in x's dtype (cuda_quant_product.cpp).
Primitive quantized_product(CudaBackend& backend, Primitive x, const Primitive& weight,
                            OptionalPrimitive bias);
// The rows of a QFloat table [rows, width] in stored order that indices name, decoded to f32.
Primitive quantized_rows(CudaBackend& backend, const CudaQuantTensor& table,
                         const Primitive& indices);
// The blocks of q decoded to f32, contiguous over its stored shape.
TensorPtr decode_blocks(CudaBackend& backend, const CudaQuantTensor& q, const char* op);

}  // namespace kiln::cuda
