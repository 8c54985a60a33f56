#include "core/checked.h"

#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::checked {

void fail_overflow(std::string_view op, std::string_view what, std::int64_t a, char sign,
                   std::int64_t b) {
  detail::fail<InvalidArgument>(op, what, " overflows int64: ", a, ' ', sign, ' ', b);
}

namespace {

// The product of the non-zero sizes (a zero makes the count 0 but does not excuse the rest);
// false when that product exceeds kMaxElements.
bool bounded_product(std::span<const std::int64_t> sizes, std::int64_t& count,
                     bool& has_zero) noexcept {
  std::int64_t nonzero = 1;
  has_zero = false;
  for (std::int64_t d : sizes) {
    if (d == 0) {
      has_zero = true;
      continue;
    }
    if (__builtin_mul_overflow(nonzero, d, &nonzero) || nonzero > kMaxElements) return false;
  }
  count = has_zero ? 0 : nonzero;
  return true;
}

void check_non_negative(const Shape& shape, std::string_view op) {
  for (std::int64_t d : shape.dims()) {
    if (d < 0) detail::fail<InvalidArgument>(op, "negative dimension in shape ", shape.to_string());
  }
}

}  // namespace

std::int64_t num_elements(const Shape& shape, std::string_view op) {
  check_non_negative(shape, op);
  std::int64_t count = 0;
  bool has_zero = false;
  if (!bounded_product(shape.dims(), count, has_zero)) {
    detail::fail<InvalidArgument>(op, "shape ", shape.to_string(),
                                  " has more than 2^48 elements (the most a tensor can have)");
  }
  return count;
}

std::int64_t product(std::span<const std::int64_t> sizes, std::string_view op,
                     std::string_view what) {
  std::int64_t count = 0;
  bool has_zero = false;
  if (!bounded_product(sizes, count, has_zero)) {
    detail::fail<InvalidArgument>(op, what, " exceeds 2^48 elements (the most a tensor can have)");
  }
  return count;
}

std::size_t dense_bytes(const Shape& shape, DType dtype, std::string_view op) {
  check_non_negative(shape, op);
  std::int64_t count = 0;
  bool has_zero = false;
  const bool bounded = bounded_product(shape.dims(), count, has_zero);
  const std::uint64_t bytes = static_cast<std::uint64_t>(count) * dtype_size(dtype);
  if (!bounded || bytes > kMaxBytes) {
    detail::fail<OutOfMemory>(op, "shape ", shape.to_string(), " of ", dtype_name(dtype),
                              " is too large to allocate (more than 2^48 elements or 2^50 bytes)");
  }
  return static_cast<std::size_t>(bytes);
}

std::int64_t arange_length(std::int64_t start, std::int64_t end, std::int64_t step,
                           std::string_view op) {
  if (step == 0) detail::fail<InvalidArgument>(op, "step cannot be 0");
  const __int128 span = static_cast<__int128>(end) - start;
  const __int128 by = step;
  __int128 count = 0;
  if (by > 0 && span > 0) count = (span + by - 1) / by;
  if (by < 0 && span < 0) count = (-span - by - 1) / -by;
  if (count > kMaxElements) {
    detail::fail<OutOfMemory>(op, "arange(", start, ", ", end, ", ", step, ") has ",
                              static_cast<double>(count), " values, more than 2^48");
  }
  return static_cast<std::int64_t>(count);
}

}  // namespace kiln::checked
