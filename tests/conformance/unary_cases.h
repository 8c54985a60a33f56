// The float unary ops of the conformance table, one entry each: a float64 reference and the
// domain its values are checked on, and the narrower one its gradient is checked on where the
// derivative misbehaves at the ends. rows_elementwise.cpp holds the table (adding a float unary
// op is one line there) and checks the values; grad_rows_elementwise.cpp checks the gradients
// of those ops.def marks differentiable.
#pragma once

#include <string>
#include <vector>

#include "conformance/conformance.h"

namespace kiln::conformance {

struct UnaryFloatCase {
  const char* name;
  Primitive (*op)(Primitive);
  double (*ref)(double);
  double lo, hi;            // values
  double grad_lo, grad_hi;  // gradients
};

const std::vector<UnaryFloatCase>& unary_float_cases();

// The names of the cases, each with prefix ("grad:" for gradcheck rows), for a row's op list.
std::vector<std::string> unary_float_names(const std::string& prefix = "");

}  // namespace kiln::conformance
