// The CPU backend's primitive: one type for every kind and dtype. A tensor is a StridedTensor view
// (shape, strides in elements, offset) on a shared CpuStorage, so transpose, permute, slice,
// expand and most reshapes cost O(1).
#pragma once

#include <memory>

#include "backends/cpu/allocator.h"
#include "contract/strided_tensor.h"

namespace kiln::cpu {

using Strides = strided::Strides;

class CpuTensor final : public StridedTensor {
 public:
  static constexpr const char* kViewOp = "cpu view";

  // A fresh row-major tensor filling storage from its start.
  CpuTensor(DType dtype, const Shape& shape, std::shared_ptr<CpuStorage> storage)
      : StridedTensor(dtype, shape, Device::cpu()), storage_(std::move(storage)) {}
  // A view of base's storage (make_view checks that it lies inside).
  CpuTensor(const CpuTensor& base, Shape shape, Strides strides, std::int64_t offset)
      : StridedTensor(base.dtype(), std::move(shape), base.device(), std::move(strides), offset),
        storage_(base.storage_) {}

  bool storage_unique() const noexcept override { return storage_.use_count() == 1; }
  const void* storage_key() const noexcept override { return storage_.get(); }

  const std::shared_ptr<CpuStorage>& storage() const noexcept { return storage_; }
  // Takes other's storage and gives it this one's (CpuBackend::assign's move: both contiguous
  // from offset 0, of one byte size, neither storage shared with a view).
  void swap_storage(CpuTensor& other) noexcept { storage_.swap(other.storage_); }
  // Address of element [0, 0, ...].
  std::byte* data() const noexcept {
    return storage_->data() + offset() * static_cast<std::int64_t>(dtype_size(dtype_));
  }
  template <class T>
  T* data_as() const noexcept {
    return reinterpret_cast<T*>(data());
  }

 private:
  std::shared_ptr<CpuStorage> storage_;
};

inline CpuTensor& as_cpu(const Primitive& p) noexcept { return static_cast<CpuTensor&>(*p); }

// A fresh contiguous tensor (contents uninitialised).
std::shared_ptr<CpuTensor> make_tensor(DType dtype, const Shape& shape);
// x itself if contiguous, else a contiguous copy.
std::shared_ptr<CpuTensor> contiguous(const Primitive& x);
// A contiguous copy with its own storage.
std::shared_ptr<CpuTensor> copy(const CpuTensor& x);
// x's memory if it may be written in place as the output of an op with out_shape/dtype.
bool reusable_as_output(const Primitive& x, const Shape& out_shape, DType dtype) noexcept;

}  // namespace kiln::cpu
