// The CUDA backend's primitive: like the CPU's, a view (shape, strides in elements, offset in
// elements) on shared device storage, so reshape, expand, permute, flip, slice and unfold are
// O(1). Strides may be zero (expand) or negative (flip).
#pragma once

#include <cuda.h>

#include <memory>

#include "kiln/primitive.h"
#include "kiln/shape.h"

namespace kiln::cuda {

class Allocator;
using Strides = detail::DimVector;

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

class CudaTensor final : public TensorPrimitive {
 public:
  CudaTensor(DType dtype, Shape shape, Device device, std::shared_ptr<Storage> storage,
             Strides strides, std::int64_t offset)
      : TensorPrimitive(dtype, std::move(shape), device),
        storage_(std::move(storage)),
        strides_(std::move(strides)),
        offset_(offset),
        contiguous_(compute_contiguous()) {}

  bool storage_unique() const noexcept override { return storage_.use_count() == 1; }
  const std::shared_ptr<Storage>& storage() const noexcept { return storage_; }
  const Strides& strides() const noexcept { return strides_; }
  std::int64_t offset() const noexcept { return offset_; }
  // Device address of element [0, 0, ...].
  CUdeviceptr data() const noexcept {
    return storage_->pointer() +
           static_cast<CUdeviceptr>(offset_ * static_cast<std::int64_t>(dtype_size(dtype_)));
  }
  // Row-major without gaps (size-1 dims may have any stride). Known from construction: every
  // op asks it of its operands.
  bool is_contiguous() const noexcept { return contiguous_; }

 private:
  bool compute_contiguous() const noexcept;

  std::shared_ptr<Storage> storage_;
  Strides strides_;
  std::int64_t offset_;
  bool contiguous_;
};

using TensorPtr = std::shared_ptr<CudaTensor>;

inline CudaTensor& as_cuda(const Primitive& p) noexcept { return static_cast<CudaTensor&>(*p); }

Strides contiguous_strides(const Shape& shape);
// x's strides seen from a broadcast shape (0 where x is broadcast); rank(x) <= rank(shape).
Strides broadcast_strides(const CudaTensor& x, const Shape& shape);
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// A view of base's storage.
TensorPtr make_view(const CudaTensor& base, Shape shape, Strides strides, std::int64_t offset);

}  // namespace kiln::cuda
