#include "backends/cpu/cpu_tensor.h"

#include <cstring>

#include "backends/cpu/loops.h"
#include "contract/strided.h"
#include "core/checked.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::cpu {

bool CpuTensor::is_contiguous() const noexcept { return strided::is_contiguous(shape_, strides_); }

Strides contiguous_strides(const Shape& shape) { return strided::contiguous_strides(shape); }

std::shared_ptr<CpuTensor> make_tensor(DType dtype, const Shape& shape) {
  // Every CPU allocation passes here: sizes are computed without overflow, so an absurd shape
  // (e.g. from repeat or expand-then-copy) is an error, never a short buffer.
  const std::size_t bytes = checked::dense_bytes(shape, dtype, "cpu");
  return std::make_shared<CpuTensor>(dtype, shape, std::make_shared<CpuStorage>(bytes),
                                     contiguous_strides(shape), 0);
}

std::shared_ptr<CpuTensor> make_view(const CpuTensor& base, Shape shape, Strides strides,
                                     std::int64_t offset) {
  // Every view passes here too: one that reaches outside its storage is refused, whatever
  // arithmetic produced it.
  strided::check_view_in_storage(
      shape, strides, offset,
      static_cast<std::int64_t>(base.storage()->bytes() / dtype_size(base.dtype())), "cpu view");
  return std::make_shared<CpuTensor>(base.dtype(), std::move(shape), base.storage(),
                                     std::move(strides), offset);
}

std::shared_ptr<CpuTensor> copy(const CpuTensor& x) {
  auto out = make_tensor(x.dtype(), x.shape());
  copy_strided(x, *out);
  return out;
}

std::shared_ptr<CpuTensor> contiguous(const Primitive& x) {
  CpuTensor& t = as_cpu(x);
  if (t.is_contiguous()) return std::static_pointer_cast<CpuTensor>(x);
  return copy(t);
}

Strides broadcast_strides(const CpuTensor& x, const Shape& shape) {
  return strided::broadcast_strides(x.shape(), x.strides(), shape);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  return strided::broadcast_shapes(a, b, op);
}

bool reusable_as_output(const Primitive& x, const Shape& out_shape, DType dtype) noexcept {
  if (!can_mut(x)) return false;
  const CpuTensor& t = as_cpu(x);
  return t.dtype() == dtype && t.shape() == out_shape && t.is_contiguous() && t.offset() == 0;
}

}  // namespace kiln::cpu
