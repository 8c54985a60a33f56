#include "record/safetensors_format.h"

#include <array>
#include <utility>

#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::record::detail {
namespace {

// Listed in the reference's layout order (its dtype enumeration, widest first); the position
// is the layout rank.
constexpr std::array<std::pair<DType, std::string_view>, 13> kDTypeNames = {{
    {DType::U64, "U64"},
    {DType::I64, "I64"},
    {DType::F64, "F64"},
    {DType::F32, "F32"},
    {DType::U32, "U32"},
    {DType::I32, "I32"},
    {DType::BF16, "BF16"},
    {DType::F16, "F16"},
    {DType::U16, "U16"},
    {DType::I16, "I16"},
    {DType::I8, "I8"},
    {DType::U8, "U8"},
    {DType::Bool, "BOOL"},
}};

constexpr std::array<std::string_view, 7> kForeignNames = {
    "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64"};

}  // namespace

std::string_view safetensors_dtype_name(DType dtype, std::string_view op) {
  for (const auto& [d, name] : kDTypeNames) {
    if (d == dtype) return name;
  }
  kiln::detail::fail<UnsupportedDType>(op, "dtype ", dtype_name(dtype),
                                       " has no safetensors equivalent");
}

std::optional<DType> dtype_from_safetensors_name(std::string_view name) noexcept {
  for (const auto& [d, n] : kDTypeNames) {
    if (n == name) return d;
  }
  return std::nullopt;
}

bool is_foreign_safetensors_dtype(std::string_view name) noexcept {
  for (std::string_view n : kForeignNames) {
    if (n == name) return true;
  }
  return false;
}

int layout_rank(DType dtype) noexcept {
  for (std::size_t i = 0; i < kDTypeNames.size(); ++i) {
    if (kDTypeNames[i].first == dtype) return static_cast<int>(i);
  }
  return static_cast<int>(kDTypeNames.size());
}

std::uint64_t read_u64_le(std::span<const std::byte, 8> bytes) noexcept {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < 8; ++i) {
    value |= static_cast<std::uint64_t>(bytes[i]) << (8 * i);
  }
  return value;
}

}  // namespace kiln::record::detail
