#include "core/buffer.h"

#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::detail {

void fail_allocation(std::size_t count, std::size_t element_size) {
  fail<OutOfMemory>("cpu", "cannot allocate ", count, " elements of ", element_size,
                    " bytes for scratch memory");
}

std::vector<std::byte> allocate_bytes(std::size_t bytes) {
  if (bytes > kMaxHostAllocationBytes) {
    fail<OutOfMemory>("cpu", "cannot allocate ", bytes, " bytes of host memory");
  }
  try {
    return std::vector<std::byte>(bytes);
  } catch (const std::bad_alloc&) {
    fail<OutOfMemory>("cpu", "cannot allocate ", bytes, " bytes of host memory");
  } catch (const std::length_error&) {
    fail<OutOfMemory>("cpu", "cannot allocate ", bytes, " bytes of host memory");
  }
}

}  // namespace kiln::detail
