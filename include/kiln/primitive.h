// TensorPrimitive: what a backend returns for a tensor. Backends derive their own primitive
// type; handles are shared pointers passed by value, so a backend can tell when it holds the
// only reference and may write in place.
#pragma once

#include <memory>

#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/shape.h"

namespace kiln {

struct QuantScheme;

class TensorPrimitive {
 public:
  TensorPrimitive(DType dtype, Shape&& shape, Device device)
      : dtype_(dtype), shape_(std::move(shape)), device_(device) {}
  // Copies once (a by-value parameter would copy, then move): decorators wrap primitives per op.
  TensorPrimitive(DType dtype, const Shape& shape, Device device)
      : dtype_(dtype), shape_(shape), device_(device) {}
  virtual ~TensorPrimitive() = default;
  TensorPrimitive(const TensorPrimitive&) = delete;
  TensorPrimitive& operator=(const TensorPrimitive&) = delete;

  DType dtype() const noexcept { return dtype_; }
  const Shape& shape() const noexcept { return shape_; }
  std::size_t rank() const noexcept { return shape_.rank(); }
  Device device() const noexcept { return device_; }
  // True when the backing memory is owned by this primitive alone (no other view shares it).
  virtual bool storage_unique() const noexcept = 0;
  // A QFloat tensor's blocks' scheme, where its backend keeps one with it (the CPU); null for
  // every other tensor (Device::set_quant_propagation reads it).
  virtual const QuantScheme* quant_scheme() const noexcept { return nullptr; }

 protected:
  DType dtype_;
  Shape shape_;
  Device device_;
};

using Primitive = std::shared_ptr<TensorPrimitive>;

// A handle may be written in place when nobody else can observe the write.
inline bool can_mut(const Primitive& p) noexcept {
  return p && p.use_count() == 1 && p->storage_unique();
}

}  // namespace kiln
