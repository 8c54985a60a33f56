// Small helpers to build error messages ("[op] what: values") without pulling fmt into headers.
#pragma once

#include <initializer_list>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace kiln::detail {

// One value of a message: a pointer to it and the function that prints it. A message is built
// out of line from a list of these (concat_parts), so a call site with new argument types
// instantiates one small printer per type, not a string stream per list of types.
class MessagePart {
 public:
  MessagePart(const char* text) noexcept : text_(text != nullptr ? text : "(null)") {}
  MessagePart(std::string_view text) noexcept : text_(text) {}
  MessagePart(const std::string& text) noexcept : text_(text) {}
  template <class T>
  MessagePart(const T& value) noexcept
      : value_(&value),
        write_([](std::ostream& out, const void* v) { out << *static_cast<const T*>(v); }) {}

  void write(std::ostream& out) const;

 private:
  const void* value_ = nullptr;
  void (*write_)(std::ostream&, const void*) = nullptr;  // null: the part is text_
  std::string_view text_;
};

// The parts printed one after another (as operator<< prints each).
std::string concat_parts(std::initializer_list<MessagePart> parts);

template <class... Parts>
std::string concat(const Parts&... parts) {
  return concat_parts({MessagePart(parts)...});
}

// Throws ErrorType with message: one copy per error type, called by every fail below.
template <class ErrorType>
[[noreturn]] [[gnu::noinline]] void throw_message(std::string message) {
  throw ErrorType(std::move(message));
}

// Throws ErrorType with the message "[op] parts...".
template <class ErrorType, class... Parts>
[[noreturn]] void fail(std::string_view op, const Parts&... parts) {
  throw_message<ErrorType>(
      concat_parts({MessagePart("["), MessagePart(op), MessagePart("] "), MessagePart(parts)...}));
}

}  // namespace kiln::detail
