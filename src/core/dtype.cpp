#include "kiln/dtype.h"

namespace kiln {

std::string_view dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::F64:
      return "f64";
    case DType::F32:
      return "f32";
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
    case DType::I64:
      return "i64";
    case DType::I32:
      return "i32";
    case DType::I16:
      return "i16";
    case DType::I8:
      return "i8";
    case DType::U64:
      return "u64";
    case DType::U32:
      return "u32";
    case DType::U16:
      return "u16";
    case DType::U8:
      return "u8";
    case DType::Bool:
      return "bool";
    case DType::QFloat:
      return "qfloat";
  }
  return "?";
}

}  // namespace kiln
