#include "backends/cuda/cuda_tensor.h"

#include "backends/cuda/allocator.h"
#include "contract/strided.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::cuda {

Storage::Storage(Allocator& allocator, std::size_t bytes, const char* op)
    : allocator_(allocator), bytes_(bytes) {
  pointer_ = allocator_.allocate(bytes, capacity_, op);
}

Storage::~Storage() { allocator_.deallocate(pointer_, capacity_); }

bool CudaTensor::compute_contiguous() const noexcept {
  return strided::is_contiguous(shape_, strides_);
}

Strides contiguous_strides(const Shape& shape) { return strided::contiguous_strides(shape); }

Strides broadcast_strides(const CudaTensor& x, const Shape& shape) {
  return strided::broadcast_strides(x.shape(), x.strides(), shape);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  return strided::broadcast_shapes(a, b, op);
}

TensorPtr make_view(const CudaTensor& base, Shape shape, Strides strides, std::int64_t offset) {
  // Every view passes here: one that reaches outside its storage is refused.
  strided::check_view_in_storage(
      shape, strides, offset,
      static_cast<std::int64_t>(base.storage()->bytes() / dtype_size(base.dtype())), "cuda view");
  return std::make_shared<CudaTensor>(base.dtype(), std::move(shape), base.device(), base.storage(),
                                      std::move(strides), offset);
}

}  // namespace kiln::cuda
