#include "kiln/shape.h"

#include <sstream>

namespace kiln {

std::string Shape::to_string() const {
  std::ostringstream out;
  out << *this;
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const Shape& shape) {
  out << '[';
  for (std::size_t i = 0; i < shape.rank(); ++i) out << (i ? ", " : "") << shape[i];
  return out << ']';
}

}  // namespace kiln
