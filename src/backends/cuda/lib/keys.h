// How the sort and topk kernels see a dtype: as unsigned integers of its width (U) and a kind
// saying how those bits order (key_codec.cuh, and topk_source.cpp for the generated topk, map
// them to order-preserving keys). Four widths instead of twelve dtypes keep the kernels few.
#pragma once

#include <cstdint>

#include "kiln/detail/format.h"
#include "kiln/dtype.h"
#include "kiln/error.h"

namespace kiln::cuda::lib {

// How the bits of a dtype order: as unsigned, as two's complement, or as an IEEE float.
enum class KeyKind { Unsigned, Signed, F16, BF16, F32, F64 };

template <class U, KeyKind K>
struct KeyType {
  using Bits = U;
  static constexpr KeyKind kind = K;
};

// f(KeyType<U, K>{}) for dtype; UnsupportedDType naming op for Bool and QFloat.
template <class F>
decltype(auto) visit_key_type(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::F64:
      return f(KeyType<std::uint64_t, KeyKind::F64>{});
    case DType::F32:
      return f(KeyType<std::uint32_t, KeyKind::F32>{});
    case DType::F16:
      return f(KeyType<std::uint16_t, KeyKind::F16>{});
    case DType::BF16:
      return f(KeyType<std::uint16_t, KeyKind::BF16>{});
    case DType::I64:
      return f(KeyType<std::uint64_t, KeyKind::Signed>{});
    case DType::I32:
      return f(KeyType<std::uint32_t, KeyKind::Signed>{});
    case DType::I16:
      return f(KeyType<std::uint16_t, KeyKind::Signed>{});
    case DType::I8:
      return f(KeyType<std::uint8_t, KeyKind::Signed>{});
    case DType::U64:
      return f(KeyType<std::uint64_t, KeyKind::Unsigned>{});
    case DType::U32:
      return f(KeyType<std::uint32_t, KeyKind::Unsigned>{});
    case DType::U16:
      return f(KeyType<std::uint16_t, KeyKind::Unsigned>{});
    case DType::U8:
      return f(KeyType<std::uint8_t, KeyKind::Unsigned>{});
    default:
      break;
  }
  detail::fail<UnsupportedDType>(op, "cannot order dtype ", dtype_name(dtype));
}

}  // namespace kiln::cuda::lib
