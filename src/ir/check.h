// Checks shared by validate (a program built in memory) and deserialize (one read off the wire):
// the same rules, a different error type.
#pragma once

#include <cstdint>
#include <string>

#include "ir/op_ir.h"

namespace kiln::ir::internal {

using Fail = void (*)(std::string message);

// Whether a value may be read: defined[id] for a program, a present value for replay.
struct Defined {
  bool (*test)(const void* context, std::uint32_t id);
  const void* context;
};

// op against its ops.def signature: a known code, the arity of its tensors, the count and kinds
// of its attributes, the count of its outputs and their types, every input defined (kNoTensor
// only for an optional tensor). Calls fail with "op N (name): what" otherwise.
void check_op(const Op& op, Defined defined, std::size_t position, Fail fail);
// Defined over a vector<bool>.
Defined defined_in(const std::vector<bool>& defined);
// The checks of validate (op_ir.h), failing through fail.
void validate_program(const Program& program, Fail fail);
// A dtype value the enum defines, and a shape of non-negative dims.
bool valid_dtype(DType dtype) noexcept;
void check_type(const TensorType& type, const std::string& what, Fail fail);

}  // namespace kiln::ir::internal
