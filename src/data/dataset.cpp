#include "kiln/data/dataset.h"

#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::data::detail {

void check_index(const char* op, std::size_t index, std::size_t size) {
  if (index >= size) {
    kiln::detail::fail<InvalidArgument>(op, "index ", index, " is out of range for a dataset of ",
                                        size, " items");
  }
}

}  // namespace kiln::data::detail
