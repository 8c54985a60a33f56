// The CUDA backend's QFloat primitive: quant_view::QuantTensor (the blocks of a scheme seen
// through a permutation of their dims) in device storage, and the QFloat paths of the plugin.
#pragma once

#include <memory>
#include <utility>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_tensor.h"
#include "contract/quant_view.h"

namespace kiln::cuda {

class CudaQuantTensor final : public quant_view::QuantTensor<Storage> {
 public:
  // The blocks of `stored` from byte `offset` of blocks, viewed with dim i showing dim axes[i]
  // of stored.
  CudaQuantTensor(QuantScheme scheme, const Shape& stored, Axes axes, Device device,
                  std::shared_ptr<Storage> blocks, std::int64_t offset)
      : QuantTensor(scheme, stored, std::move(axes), std::move(device), std::move(blocks), offset) {
  }

  // Device address of the first block.
  CUdeviceptr blocks() const noexcept {
    return blocks_->pointer() + static_cast<CUdeviceptr>(offset_);
  }
  // Bytes of the blocks (quantized_bytes of the stored shape).
  std::size_t bytes() const;
  // Bytes of one row of the stored shape's last dim.
  std::int64_t row_bytes() const;
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
