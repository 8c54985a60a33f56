// Element types, their properties, and how a device can use them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "kiln/half.h"

namespace kiln {

enum class DType : std::uint8_t {
  F64,
  F32,
  F16,
  BF16,
  I64,
  I32,
  I16,
  I8,
  U64,
  U32,
  U16,
  U8,
  Bool,
  QFloat,  // quantized float; the scheme travels with the tensor (quantization issue)
};

inline constexpr DType kAllDTypes[] = {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64,
                                       DType::I32, DType::I16, DType::I8,  DType::U64,  DType::U32,
                                       DType::U16, DType::U8,  DType::Bool};

std::string_view dtype_name(DType dtype) noexcept;
// Bytes per element (QFloat: 1, the storage of its quantized values).
constexpr std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::F64:
    case DType::I64:
    case DType::U64:
      return 8;
    case DType::F32:
    case DType::I32:
    case DType::U32:
      return 4;
    case DType::F16:
    case DType::BF16:
    case DType::I16:
    case DType::U16:
      return 2;
    default:
      return 1;
  }
}
constexpr bool is_float(DType d) noexcept {
  return d == DType::F64 || d == DType::F32 || d == DType::F16 || d == DType::BF16;
}
constexpr bool is_signed_int(DType d) noexcept {
  return d == DType::I64 || d == DType::I32 || d == DType::I16 || d == DType::I8;
}
constexpr bool is_unsigned_int(DType d) noexcept {
  return d == DType::U64 || d == DType::U32 || d == DType::U16 || d == DType::U8;
}
constexpr bool is_int(DType d) noexcept { return is_signed_int(d) || is_unsigned_int(d); }
constexpr bool is_bool(DType d) noexcept { return d == DType::Bool; }

// The C++ type stored for each dtype, and back.
template <class T>
struct dtype_of;
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::F64;
};
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct dtype_of<half> {
  static constexpr DType value = DType::F16;
};
template <>
struct dtype_of<bfloat16> {
  static constexpr DType value = DType::BF16;
};
template <>
struct dtype_of<std::int64_t> {
  static constexpr DType value = DType::I64;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::I32;
};
template <>
struct dtype_of<std::int16_t> {
  static constexpr DType value = DType::I16;
};
template <>
struct dtype_of<std::int8_t> {
  static constexpr DType value = DType::I8;
};
template <>
struct dtype_of<std::uint64_t> {
  static constexpr DType value = DType::U64;
};
template <>
struct dtype_of<std::uint32_t> {
  static constexpr DType value = DType::U32;
};
template <>
struct dtype_of<std::uint16_t> {
  static constexpr DType value = DType::U16;
};
template <>
struct dtype_of<std::uint8_t> {
  static constexpr DType value = DType::U8;
};
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::Bool;
};
template <class T>
inline constexpr DType dtype_of_v = dtype_of<std::remove_cv_t<T>>::value;

// How a device can use a dtype. Storage: tensors of it can exist there; Arithmetic: ops compute
// in it; Accelerated: a hardware fast path exists (tensor cores, ...).
enum class DTypeUsage : std::uint8_t { Storage = 1, Arithmetic = 2, Accelerated = 4 };

class DTypeUsageSet {
 public:
  constexpr DTypeUsageSet() = default;
  constexpr DTypeUsageSet(std::initializer_list<DTypeUsage> usages) {
    for (DTypeUsage u : usages) bits_ |= static_cast<std::uint8_t>(u);
  }
  constexpr bool contains(DTypeUsage u) const noexcept {
    return (bits_ & static_cast<std::uint8_t>(u)) != 0;
  }
  constexpr bool empty() const noexcept { return bits_ == 0; }
  constexpr DTypeUsageSet& insert(DTypeUsage u) noexcept {
    bits_ |= static_cast<std::uint8_t>(u);
    return *this;
  }
  constexpr bool operator==(const DTypeUsageSet&) const = default;

 private:
  std::uint8_t bits_ = 0;
};

}  // namespace kiln
