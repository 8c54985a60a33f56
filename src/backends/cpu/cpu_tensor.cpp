#include "backends/cpu/cpu_tensor.h"

#include <cstring>

#include "backends/cpu/loops.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::cpu {

bool CpuTensor::is_contiguous() const noexcept {
  std::int64_t expected = 1;
  for (std::size_t i = shape_.rank(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.rank());
  std::int64_t stride = 1;
  for (std::size_t i = shape.rank(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

std::shared_ptr<CpuTensor> make_tensor(DType dtype, const Shape& shape) {
  // Every CPU allocation passes here: sizes are computed without overflow, so an absurd shape
  // (e.g. from repeat or expand-then-copy) is an error, never a short buffer.
  std::uint64_t bytes = dtype_size(dtype);
  for (std::int64_t d : shape.dims()) {
    if (d < 0) detail::fail<InvalidArgument>("cpu", "negative dimension in shape ", shape.to_string());
    if (d == 0) bytes = 0;
  }
  for (std::int64_t d : shape.dims()) {
    if (bytes == 0) break;
    if (__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(d), &bytes) ||
        bytes > (std::uint64_t{1} << 50)) {
      detail::fail<OutOfMemory>("cpu", "shape ", shape.to_string(), " of ",
                                dtype_name(dtype), " is too large to allocate");
    }
  }
  return std::make_shared<CpuTensor>(dtype, shape,
                                     std::make_shared<CpuStorage>(static_cast<std::size_t>(bytes)),
                                     contiguous_strides(shape), 0);
}

std::shared_ptr<CpuTensor> make_view(const CpuTensor& base, Shape shape, Strides strides,
                                     std::int64_t offset) {
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
  Strides out(shape.rank(), 0);
  const std::size_t lead = shape.rank() - x.rank();
  for (std::size_t i = 0; i < x.rank(); ++i) {
    out[lead + i] = x.shape()[i] == 1 && shape[lead + i] != 1 ? 0 : x.strides()[i];
  }
  return out;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  if (a == b) return a;
  const std::size_t rank = std::max(a.rank(), b.rank());
  detail::DimVector out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t da = i < rank - a.rank() ? 1 : a[i - (rank - a.rank())];
    const std::int64_t db = i < rank - b.rank() ? 1 : b[i - (rank - b.rank())];
    if (da != db && da != 1 && db != 1) {
      detail::fail<ShapeMismatch>(op, "shapes ", a.to_string(), " and ", b.to_string(),
                                  " cannot be broadcast (dim ", i, ": ", da, " vs ", db, ")");
    }
    out[i] = da == 1 ? db : da;
  }
  return Shape(std::move(out));
}

bool reusable_as_output(const Primitive& x, const Shape& out_shape, DType dtype) noexcept {
  if (!can_mut(x)) return false;
  const CpuTensor& t = as_cpu(x);
  return t.dtype() == dtype && t.shape() == out_shape && t.is_contiguous() && t.offset() == 0;
}

}  // namespace kiln::cpu
