// Small helpers to build error messages ("[op] what: values") without pulling fmt into headers.
#pragma once

#include <sstream>
#include <string>
#include <string_view>
#include <utility>

namespace kiln::detail {

template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

// Throws ErrorType with the message "[op] parts...".
template <class ErrorType, class... Parts>
[[noreturn]] void fail(std::string_view op, Parts&&... parts) {
  throw ErrorType(concat("[", op, "] ", std::forward<Parts>(parts)...));
}

}  // namespace kiln::detail
