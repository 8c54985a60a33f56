#include "backends/cuda/cuda_tensor.h"

#include "backends/cuda/allocator.h"

namespace kiln::cuda {

Storage::Storage(Allocator& allocator, std::size_t bytes, const char* op)
    : allocator_(allocator), bytes_(bytes) {
  pointer_ = allocator_.allocate(bytes, capacity_, op);
}

Storage::~Storage() { allocator_.deallocate(pointer_, capacity_); }

}  // namespace kiln::cuda
