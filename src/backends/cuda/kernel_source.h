// Pieces of generated CUDA source shared by every kernel family: the prelude (16-bit float
// conversions, integer arithmetic with the CPU backend's semantics, float math overloads), the
// C types of each dtype in memory ("storage") and in arithmetic ("compute"), and the code that
// loads, stores and converts elements the way kiln's casts do.
//
// The generators write each kernel as a raw-string template for fmt (header-only): named fields
// `{name}` filled by `"name"_a = value` (fmt::literals), which fmt checks at compile time (a
// field without its argument, or a stray brace, does not compile); CUDA's own braces are doubled
// as `{{` `}}`. Blocks with many braces and nothing to fill stay plain raw strings, joined in.
#pragma once

#include <string>

#include "kiln/dtype.h"

namespace kiln::cuda {

// The prelude every generated kernel starts with.
const std::string& kernel_prelude();
// C type of dtype in memory: f16/bf16 are raw 16-bit words, bool a byte.
const char* storage_type(DType dtype);
// C type arithmetic is done in: float for f16/bf16, bool for Bool, the type itself otherwise.
const char* compute_type(DType dtype);
// Expression loading the element `at` (an lvalue of storage type) as its compute type.
std::string load_expression(DType dtype, const std::string& at);
// Expression turning value (compute type of dtype) into dtype's storage type.
std::string store_expression(DType dtype, const std::string& value);
// Expression converting value, of from's compute type, to to's compute type with kiln's cast
// semantics (float -> int truncates, saturates, NaN -> 0; -> bool is != 0; -> f16 via float).
std::string convert_expression(DType from, DType to, const std::string& value);
// A short name for keys ("f32", "i64", ...).
const char* short_name(DType dtype);

}  // namespace kiln::cuda
