// The CPU backend's primitive: one type for every kind and dtype. A tensor is a view
// (shape, strides in elements, offset) on a shared CpuStorage, so transpose, permute, slice,
// expand and most reshapes cost O(1).
#pragma once

#include <memory>

#include "backends/cpu/allocator.h"
#include "kiln/primitive.h"

namespace kiln::cpu {

using Strides = detail::DimVector;

class CpuTensor final : public TensorPrimitive {
 public:
  CpuTensor(DType dtype, Shape shape, std::shared_ptr<CpuStorage> storage, Strides strides,
            std::int64_t offset)
      : TensorPrimitive(dtype, std::move(shape), Device::cpu()),
        storage_(std::move(storage)),
        strides_(std::move(strides)),
        offset_(offset) {}

  bool storage_unique() const noexcept override { return storage_.use_count() == 1; }

  const std::shared_ptr<CpuStorage>& storage() const noexcept { return storage_; }
  const Strides& strides() const noexcept { return strides_; }
  std::int64_t offset() const noexcept { return offset_; }
  // Address of element [0, 0, ...].
  std::byte* data() const noexcept {
    return storage_->data() + offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
  }
  template <class T>
  T* data_as() const noexcept {
    return reinterpret_cast<T*>(data());
  }
  // Row-major with no gaps (size-1 dims may have any stride).
  bool is_contiguous() const noexcept;

 private:
  std::shared_ptr<CpuStorage> storage_;
  Strides strides_;
  std::int64_t offset_;
};

inline CpuTensor& as_cpu(const Primitive& p) noexcept { return static_cast<CpuTensor&>(*p); }

// Row-major strides of shape.
Strides contiguous_strides(const Shape& shape);
// A fresh contiguous tensor (contents uninitialised).
std::shared_ptr<CpuTensor> make_tensor(DType dtype, const Shape& shape);
// A view sharing base's storage.
std::shared_ptr<CpuTensor> make_view(const CpuTensor& base, Shape shape, Strides strides,
                                     std::int64_t offset);
// x itself if contiguous, else a contiguous copy.
std::shared_ptr<CpuTensor> contiguous(const Primitive& x);
// A contiguous copy with its own storage.
std::shared_ptr<CpuTensor> copy(const CpuTensor& x);
// Strides of x as seen from a broadcast shape (0 where x is broadcast); x's rank <= shape's.
Strides broadcast_strides(const CpuTensor& x, const Shape& shape);
// The broadcast of two shapes, or ShapeMismatch naming op.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// x's memory if it may be written in place as the output of an op with out_shape/dtype.
bool reusable_as_output(const Primitive& x, const Shape& out_shape, DType dtype) noexcept;

}  // namespace kiln::cpu
