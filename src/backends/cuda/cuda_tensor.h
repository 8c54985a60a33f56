// The CUDA backend's primitive: like the CPU's, a StridedTensor view (shape, strides in elements,
// offset in elements) on shared device storage, so reshape, expand, permute, flip, slice and
// unfold are O(1). Strides may be zero (expand) or negative (flip).
#pragma once

#include <cuda.h>

#include <memory>

#include "contract/strided_tensor.h"

namespace kiln::cuda {

class Allocator;
struct AttentionSaved;  // cuda_attention.cpp
using Strides = strided::Strides;

// A block of device memory shared by the views of one tensor; returned to the allocator's
// cache when the last view goes.
class Storage {
 public:
  Storage(Allocator& allocator, std::size_t bytes, const char* op);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  CUdeviceptr pointer() const noexcept { return pointer_; }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  Allocator& allocator_;
  CUdeviceptr pointer_ = 0;
  std::size_t capacity_ = 0;
  std::size_t bytes_ = 0;
};

class CudaTensor final : public StridedTensor {
 public:
  static constexpr const char* kViewOp = "cuda view";

  // A fresh row-major tensor filling storage from its start.
  CudaTensor(DType dtype, const Shape& shape, Device device, std::shared_ptr<Storage> storage)
      : StridedTensor(dtype, shape, device), storage_(std::move(storage)) {}
  // A view of base's storage (make_view checks that it lies inside).
  CudaTensor(const CudaTensor& base, Shape shape, Strides strides, std::int64_t offset)
      : StridedTensor(base.dtype(), std::move(shape), base.device(), std::move(strides), offset),
        storage_(base.storage_) {}

  bool storage_unique() const noexcept override { return storage_.use_count() == 1; }
  const void* storage_key() const noexcept override { return storage_.get(); }
  const std::shared_ptr<Storage>& storage() const noexcept { return storage_; }
  // Device address of element [0, 0, ...]; 0 for a kernel capture's placeholder, which has no
  // storage yet (kernel_capture.h).
  CUdeviceptr data() const noexcept {
    if (!storage_) return 0;
    return storage_->pointer() +
           static_cast<CUdeviceptr>(offset() * static_cast<std::int64_t>(dtype_size(dtype_)));
  }

  // What attention's forward pass kept with this, its output, for the backward pass (each query
  // row's softmax statistics: cuda_attention.cpp); null on every other tensor, this one's views
  // included.
  const std::shared_ptr<AttentionSaved>& attention_saved() const noexcept {
    return attention_saved_;
  }
  void keep_attention_saved(std::shared_ptr<AttentionSaved> saved) noexcept {
    attention_saved_ = std::move(saved);
  }

 private:
  std::shared_ptr<Storage> storage_;
  std::shared_ptr<AttentionSaved> attention_saved_;
};

using TensorPtr = std::shared_ptr<CudaTensor>;

inline CudaTensor& as_cuda(const Primitive& p) noexcept { return static_cast<CudaTensor&>(*p); }

}  // namespace kiln::cuda
