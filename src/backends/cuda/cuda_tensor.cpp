#include "backends/cuda/cuda_tensor.h"

#include "backends/cuda/allocator.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::cuda {

Storage::Storage(Allocator& allocator, std::size_t bytes, const char* op)
    : allocator_(allocator), bytes_(bytes) {
  pointer_ = allocator_.allocate(bytes, capacity_, op);
}

Storage::~Storage() { allocator_.deallocate(pointer_, capacity_); }

bool CudaTensor::is_contiguous() const noexcept {
  std::int64_t expected = 1;
  for (std::size_t d = shape_.rank(); d-- > 0;) {
    if (shape_[d] == 1) continue;
    if (strides_[d] != expected) return false;
    expected *= shape_[d];
  }
  return true;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.rank());
  std::int64_t step = 1;
  for (std::size_t d = shape.rank(); d-- > 0;) {
    strides[d] = step;
    step *= std::max<std::int64_t>(shape[d], 1);
  }
  return strides;
}

Strides broadcast_strides(const CudaTensor& x, const Shape& shape) {
  Strides out(shape.rank(), 0);
  const std::size_t lead = shape.rank() - x.rank();
  for (std::size_t d = 0; d < x.rank(); ++d) {
    out[lead + d] = (x.shape()[d] == 1 && shape[lead + d] != 1) ? 0 : x.strides()[d];
  }
  return out;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const std::size_t rank = std::max(a.rank(), b.rank());
  detail::DimVector dims(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t x = i < rank - a.rank() ? 1 : a[i - (rank - a.rank())];
    const std::int64_t y = i < rank - b.rank() ? 1 : b[i - (rank - b.rank())];
    if (x != y && x != 1 && y != 1) {
      detail::fail<ShapeMismatch>(op, "shapes ", a.to_string(), " and ", b.to_string(),
                                  " do not broadcast");
    }
    dims[i] = x == 1 ? y : x;
  }
  return Shape(std::move(dims));
}

TensorPtr make_view(const CudaTensor& base, Shape shape, Strides strides, std::int64_t offset) {
  return std::make_shared<CudaTensor>(base.dtype(), std::move(shape), base.device(),
                                      base.storage(), std::move(strides), offset);
}

}  // namespace kiln::cuda
