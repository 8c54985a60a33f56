// GgufValue's out-of-line members and the type names its errors use.
#include "kiln/detail/format.h"
#include "kiln/error.h"
#include "kiln/record/gguf.h"

namespace kiln::record {

std::string_view gguf_type_name(GgufType type) noexcept {
  constexpr std::string_view kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                         "int32",  "float32", "bool",   "string", "array",
                                         "uint64", "int64",   "float64"};
  const auto i = static_cast<std::size_t>(type);
  return i < std::size(kNames) ? kNames[i] : std::string_view("unknown");
}

bool GgufArray::operator==(const GgufArray& other) const {
  return element_type == other.element_type && values == other.values;
}

void GgufValue::fail_type(GgufType requested) const {
  kiln::detail::fail<InvalidArgument>("GgufValue::get", "the value is a ", gguf_type_name(type()),
                                      ", not a ", gguf_type_name(requested));
}

}  // namespace kiln::record
