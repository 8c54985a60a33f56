#include "distributed/reduction.h"

#include <cstdint>
#include <type_traits>

#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::distributed {
namespace {

template <class T>
T sum(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
// The larger (more) or smaller of a and b; NaN when either is.
template <class T, bool more>
T pick(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return (more ? a < b : b < a) ? b : a;
}

template <class T, T (*combine)(T, T)>
void reduce(void* out, const void* a, const void* b, std::size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (std::size_t i = 0; i < n; ++i) o[i] = combine(x[i], y[i]);
}

template <class T>
ReduceFunction for_type(ReduceOperation operation) {
  switch (operation) {
    case ReduceOperation::Max:
      return &reduce<T, pick<T, true>>;
    case ReduceOperation::Min:
      return &reduce<T, pick<T, false>>;
    default:
      return &reduce<T, sum<T>>;
  }
}

}  // namespace

ReduceFunction reduce_function(DType dtype, ReduceOperation operation, const char* op) {
  if (operation == ReduceOperation::Mean ||
      static_cast<int>(operation) > static_cast<int>(ReduceOperation::Min)) {
    detail::fail<InvalidArgument>(op, "the communicator combines by sum, max or min, not by ",
                                  static_cast<int>(operation));
  }
  switch (dtype) {
    case DType::F64:
      return for_type<double>(operation);
    case DType::F32:
      return for_type<float>(operation);
    case DType::I64:
      return for_type<std::int64_t>(operation);
    case DType::I32:
      return for_type<std::int32_t>(operation);
    case DType::I16:
      return for_type<std::int16_t>(operation);
    case DType::I8:
      return for_type<std::int8_t>(operation);
    case DType::U64:
      return for_type<std::uint64_t>(operation);
    case DType::U32:
      return for_type<std::uint32_t>(operation);
    case DType::U16:
      return for_type<std::uint16_t>(operation);
    case DType::U8:
      return for_type<std::uint8_t>(operation);
    default:
      detail::fail<UnsupportedDType>(op,
                                     "the communicator reduces f64, f32 and integer values, "
                                     "not ",
                                     dtype_name(dtype));
  }
}

}  // namespace kiln::distributed
