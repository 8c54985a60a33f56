#include "backends/cpu/cpu_tensor.h"

#include "backends/cpu/loops.h"
#include "core/checked.h"

namespace kiln::cpu {

std::shared_ptr<CpuTensor> make_tensor(DType dtype, const Shape& shape) {
  // Every CPU allocation passes here: sizes are computed without overflow, so an absurd shape
  // (e.g. from repeat or expand-then-copy) is an error, never a short buffer.
  const std::size_t bytes = checked::dense_bytes(shape, dtype, "cpu");
  return std::make_shared<CpuTensor>(dtype, shape, std::make_shared<CpuStorage>(bytes));
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

bool reusable_as_output(const Primitive& x, const Shape& out_shape, DType dtype) noexcept {
  if (!can_mut(x)) return false;
  const CpuTensor& t = as_cpu(x);
  return t.dtype() == dtype && t.shape() == out_shape && t.is_contiguous() && t.offset() == 0;
}

}  // namespace kiln::cpu
