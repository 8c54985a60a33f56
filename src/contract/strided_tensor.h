// StridedTensor: the primitive of a backend whose tensors are windows (shape, strides in elements,
// offset in elements) on shared storage, as the CPU and CUDA backends' are. It holds the window;
// the derived primitive holds only its storage. Strides may be zero (expand) or negative (flip).
//
//   class CpuTensor final : public StridedTensor { ... std::shared_ptr<CpuStorage> storage_; };
//   auto v = make_view(t, Shape{6}, Strides{1}, t.offset());  // checked to lie in t's storage
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <utility>

#include "contract/strided.h"
#include "kiln/primitive.h"

namespace kiln {

class StridedTensor : public TensorPrimitive {
 public:
  const strided::Strides& strides() const noexcept { return strides_; }
  std::int64_t offset() const noexcept { return offset_; }
  // Row-major with no gaps (size-1 dims may have any stride). Known from construction: every op
  // asks it of its operands.
  bool is_contiguous() const noexcept { return contiguous_; }
  // Identifies the storage the view lies on: two views of one storage give the same key.
  virtual const void* storage_key() const noexcept = 0;

 protected:
  // A fresh row-major tensor at offset 0: contiguous by construction, so nothing is scanned.
  StridedTensor(DType dtype, const Shape& shape, Device device)
      : TensorPrimitive(dtype, shape, device),
        strides_(strided::contiguous_strides(shape_)),
        offset_(0),
        contiguous_(true) {}
  // A view (shape, strides, offset) on storage the derived primitive holds.
  StridedTensor(DType dtype, Shape&& shape, Device device, strided::Strides&& strides,
                std::int64_t offset)
      : TensorPrimitive(dtype, std::move(shape), device),
        strides_(std::move(strides)),
        offset_(offset),
        contiguous_(strided::is_contiguous(shape_, strides_)) {}

 private:
  strided::Strides strides_;
  std::int64_t offset_;
  bool contiguous_;
};

inline StridedTensor& as_strided(const Primitive& p) noexcept {
  return static_cast<StridedTensor&>(*p);
}

// The geometry of strided.h by the names the backends call it; x's strides seen from the
// broadcast shape `to` (0 where x is broadcast; rank(x) <= rank(to)).
using strided::broadcast_shapes;
using strided::contiguous_strides;
inline strided::Strides broadcast_strides(const StridedTensor& x, const Shape& to) {
  return strided::broadcast_strides(x.shape(), x.strides(), to);
}

// A view of base's storage, refused (InvalidArgument naming Tensor::kViewOp) unless every element
// lies inside it: whatever arithmetic produced a view, it cannot reach outside. Tensor has
// storage()->bytes() and the view constructor Tensor(base, shape, strides, offset).
template <std::derived_from<StridedTensor> Tensor>
std::shared_ptr<Tensor> make_view(const Tensor& base, Shape shape, strided::Strides strides,
                                  std::int64_t offset) {
  const auto elements =
      static_cast<std::int64_t>(base.storage()->bytes() / dtype_size(base.dtype()));
  strided::check_view_in_storage(shape, strides, offset, elements, Tensor::kViewOp);
  return std::make_shared<Tensor>(base, std::move(shape), std::move(strides), offset);
}

}  // namespace kiln
