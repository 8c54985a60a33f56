// Replay: an ir::Op run on a Backend through the virtual of its op code (generated from ops.def
// by Call<code>::replay, ir/signature.h), and whole programs with values freed at their last use.
#include <algorithm>
#include <limits>
#include <memory>

#include "ir/check.h"
#include "ir/op_ir.h"
#include "kiln/detail/format.h"

namespace kiln::ir {
namespace {

[[noreturn]] void fail_replay(std::string message) {
  throw InvalidArgument("[ir::replay] " + message);
}

// op is well formed and every value it reads is present.
void replay_checked(Backend& backend, const Op& op, std::vector<Primitive>& values,
                    std::vector<ReadResult>& reads, std::span<const bool> take) {
  switch (op.code) {
#define KILN_OP(name, ...)                                        \
  case OpCode::name:                                              \
    Call<OpCode::name>::replay(backend, op, values, reads, take); \
    return;
#include "kiln/detail/ops.def"
#undef KILN_OP
  }
}

void make_room(const Op& op, std::vector<Primitive>& values) {
  std::uint32_t end = 0;
  for (TensorId id : op.outputs) end = std::max(end, id.index + 1);
  if (values.size() < end) values.resize(end);
}

bool read_twice(const Op& op, std::size_t k) {
  return std::count(op.inputs.begin(), op.inputs.end(), op.inputs[k]) > 1;
}

}  // namespace

void replay(Backend& backend, const Op& op, std::vector<Primitive>& values,
            std::vector<ReadResult>& reads, std::span<const bool> take) {
  const internal::Defined present{[](const void* context, std::uint32_t id) {
                                    const auto& table =
                                        *static_cast<const std::vector<Primitive>*>(context);
                                    return id < table.size() && table[id] != nullptr;
                                  },
                                  &values};
  internal::check_op(op, present, 0, fail_replay);
  for (TensorId id : op.outputs) {
    if (id == kNoTensor) fail_replay(kiln::detail::concat(to_string(op), ": an output has no id"));
  }
  if (!take.empty() && take.size() != op.inputs.size()) {
    fail_replay(kiln::detail::concat(to_string(op), ": ", take.size(), " take flags for ",
                                     op.inputs.size(), " inputs"));
  }
  // A value read twice by one op is copied for both: the arguments are built in no fixed order.
  std::unique_ptr<bool[]> safe;
  if (!take.empty()) {
    safe = std::make_unique<bool[]>(take.size());
    for (std::size_t k = 0; k < take.size(); ++k) safe[k] = take[k] && !read_twice(op, k);
  }
  make_room(op, values);
  replay_checked(backend, op, values, reads,
                 safe ? std::span<const bool>(safe.get(), take.size()) : std::span<const bool>());
}

void replay_unchecked(Backend& backend, const Op& op, std::vector<Primitive>& values,
                      std::vector<ReadResult>& reads, std::span<const bool> take) {
  replay_checked(backend, op, values, reads, take);
}

RunResult run(Backend& backend, const Program& program, std::vector<Primitive> inputs) {
  validate(program);
  if (inputs.size() != program.inputs.size()) {
    kiln::detail::fail<InvalidArgument>("ir::run", "the program takes ", program.inputs.size(),
                                        " inputs, given ", inputs.size());
  }
  constexpr std::size_t kNever = std::numeric_limits<std::size_t>::max();
  constexpr std::size_t kKept = kNever - 1;
  std::vector<Primitive> values(program.value_count());
  std::vector<std::size_t> last_use(values.size(), kNever);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const TensorType& type = program.inputs[i].type;
    if (!inputs[i] || inputs[i]->dtype() != type.dtype || inputs[i]->shape() != type.shape) {
      kiln::detail::fail<InvalidArgument>(
          "ir::run", "input ", i, " is ",
          inputs[i]
              ? std::string(dtype_name(inputs[i]->dtype())) + " " + inputs[i]->shape().to_string()
              : std::string("missing"),
          " where the program has ", dtype_name(type.dtype), " ", type.shape);
    }
    values[program.inputs[i].id.index] = std::move(inputs[i]);
  }
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    for (TensorId id : program.ops[i].inputs) {
      if (id != kNoTensor) last_use[id.index] = i;
    }
  }
  for (TensorId id : program.outputs) last_use[id.index] = kKept;

  RunResult result;
  std::unique_ptr<bool[]> take;
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const Op& op = program.ops[i];
    take = std::make_unique<bool[]>(op.inputs.size());
    for (std::size_t k = 0; k < op.inputs.size(); ++k) {
      const TensorId id = op.inputs[k];
      take[k] = id != kNoTensor && last_use[id.index] == i && !read_twice(op, k);
    }
    replay_checked(backend, op, values, result.reads,
                   std::span<const bool>(take.get(), op.inputs.size()));
    for (std::size_t j = 0; j < op.outputs.size(); ++j) {
      const Primitive& out = values[op.outputs[j].index];
      const TensorType& type = op.output_types[j];
      if (!out || out->dtype() != type.dtype || out->shape() != type.shape) {
        kiln::detail::fail<InvalidArgument>(
            "ir::run", "op ", i, " (", to_string(op), ") gave ",
            out ? std::string(dtype_name(out->dtype())) + " " + out->shape().to_string()
                : std::string("nothing"),
            " for output ", j);
      }
      if (last_use[op.outputs[j].index] == kNever) values[op.outputs[j].index].reset();
    }
    for (TensorId id : op.inputs) {
      if (id != kNoTensor && last_use[id.index] == i) values[id.index].reset();
    }
  }
  result.outputs.reserve(program.outputs.size());
  for (TensorId id : program.outputs) result.outputs.push_back(values[id.index]);
  return result;
}

}  // namespace kiln::ir
