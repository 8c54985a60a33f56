#include "kiln/detail/format.h"

#include <ostream>
#include <sstream>

namespace kiln::detail {

void MessagePart::write(std::ostream& out) const {
  if (write_ != nullptr) {
    write_(out, value_);
  } else {
    out << text_;
  }
}

std::string concat_parts(std::initializer_list<MessagePart> parts) {
  std::ostringstream out;
  for (const MessagePart& part : parts) part.write(out);
  return out.str();
}

}  // namespace kiln::detail
