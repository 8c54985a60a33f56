// Checked size arithmetic. Every size, stride, offset and element count that a caller can steer
// goes through these helpers, so an overflow is an InvalidArgument naming the op and the values,
// never a wrapped number that later indexes outside a buffer.
//
// The limits: a tensor (view or not) has at most kMaxElements elements, and a dense buffer at
// most kMaxBytes bytes. Under them, elements * bytes-per-element, strides * sizes and the
// offsets of any valid view fit in int64 with room to spare, so kernels need no checks of their
// own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kiln/dtype.h"
#include "kiln/shape.h"

namespace kiln::checked {

// 2^48 elements: more than any machine can hold, far below where int64 products wrap.
inline constexpr std::int64_t kMaxElements = std::int64_t{1} << 48;
// 2^50 bytes (1 PiB): a request beyond it is OutOfMemory before any allocator sees it.
inline constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 50;

[[noreturn]] void fail_overflow(std::string_view op, std::string_view what, std::int64_t a,
                                char sign, std::int64_t b);

// a + b, a - b, a * b; InvalidArgument "[op] what overflows: a + b" when the result does not
// fit in int64. `what` names the quantity for the message ("start + length").
[[nodiscard]] inline std::int64_t add(std::int64_t a, std::int64_t b, std::string_view op,
                                      std::string_view what = "a size") {
  std::int64_t out;
  if (__builtin_add_overflow(a, b, &out)) fail_overflow(op, what, a, '+', b);
  return out;
}
[[nodiscard]] inline std::int64_t sub(std::int64_t a, std::int64_t b, std::string_view op,
                                      std::string_view what = "a size") {
  std::int64_t out;
  if (__builtin_sub_overflow(a, b, &out)) fail_overflow(op, what, a, '-', b);
  return out;
}
[[nodiscard]] inline std::int64_t mul(std::int64_t a, std::int64_t b, std::string_view op,
                                      std::string_view what = "a size") {
  std::int64_t out;
  if (__builtin_mul_overflow(a, b, &out)) fail_overflow(op, what, a, '*', b);
  return out;
}

// The element count of shape, checked: InvalidArgument for a negative dim, or when the product
// of its non-zero dims exceeds kMaxElements (a zero dim does not excuse the others: [0, 2^40,
// 2^40] is refused, as PyTorch refuses it, so that no later product of sizes can wrap).
std::int64_t num_elements(const Shape& shape, std::string_view op);
// The same check, for shapes a tensor is about to take.
inline void check_shape(const Shape& shape, std::string_view op) { (void)num_elements(shape, op); }
// The element count of a product of sizes that are each >= 0 (a merged dim, a repeat count),
// with the same limit.
std::int64_t product(std::span<const std::int64_t> sizes, std::string_view op,
                     std::string_view what);

// Bytes of a dense buffer of shape and dtype: OutOfMemory past kMaxElements elements or
// kMaxBytes bytes (nothing could hold it), InvalidArgument for a negative dim.
std::size_t dense_bytes(const Shape& shape, DType dtype, std::string_view op);

// The number of values of arange(start, end, step): ceil((end - start) / step) when the range
// is not empty, exact over all of int64 (computed in 128 bits); InvalidArgument for step 0,
// OutOfMemory past kMaxElements.
std::int64_t arange_length(std::int64_t start, std::int64_t end, std::int64_t step,
                           std::string_view op);
// The i-th value of that arange, start + i * step, computed without signed overflow: it lies
// in [start, end), so it fits even where i * step alone does not.
inline std::int64_t arange_value(std::int64_t start, std::int64_t step, std::int64_t i) noexcept {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(start) +
                                   static_cast<std::uint64_t>(i) *
                                       static_cast<std::uint64_t>(step));
}

}  // namespace kiln::checked
