#include "contract/fused_program.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "contract/backend.h"

namespace kiln {
namespace {

// random's distribution and reserved place, as describe prints them ("normal 0 1, seed 7 from
// 4096").
std::string distribution_text(const StepParams& params) {
  const Distribution& d = params.distribution;
  std::ostringstream text;
  switch (d.kind) {
    case Distribution::Kind::Default:
      text << "standard";
      break;
    case Distribution::Kind::Uniform:
      text << "uniform " << d.a << " " << d.b;
      break;
    case Distribution::Kind::Normal:
      text << "normal " << d.a << " " << d.b;
      break;
    case Distribution::Kind::Bernoulli:
      text << "bernoulli " << d.a;
      break;
  }
  text << ", seed " << params.stream.seed << " from " << params.stream.first;
  return text.str();
}

}  // namespace

std::vector<std::int32_t> last_uses(const FusedProgram& program) {
  const std::int32_t leaves = program.leaf_count();
  const auto steps = static_cast<std::int32_t>(program.steps.size());
  std::vector<std::int32_t> last_use(static_cast<std::size_t>(leaves + steps), -1);
  for (std::int32_t i = 0; i < steps; ++i) {
    const FusedStep& step = program.steps[static_cast<std::size_t>(i)];
    for (std::uint8_t k = 0; k < step.arity; ++k) {
      last_use[static_cast<std::size_t>(step.inputs[k])] = i;
    }
  }
  for (std::int32_t out : program.outputs) {
    last_use[static_cast<std::size_t>(leaves + out)] = std::numeric_limits<std::int32_t>::max();
  }
  return last_use;
}

void run_step(Backend& backend, const FusedProgram& program, std::size_t i,
              std::span<const std::int32_t> last_use, std::vector<Primitive>& values) {
  const FusedStep& step = program.steps[i];
  std::array<Primitive, 3> inputs;
  for (std::uint8_t k = 0; k < step.arity; ++k) {
    const auto v = static_cast<std::size_t>(step.inputs[k]);
    bool again = false;  // read again by this step (x * x): hand over at the last reading only
    for (std::uint8_t j = k + 1; j < step.arity; ++j)
      again = again || step.inputs[j] == step.inputs[k];
    const bool last = last_use[v] == static_cast<std::int32_t>(i) && !again;
    inputs[k] = last ? std::move(values[v]) : values[v];
  }
  values[program.leaves.size() + i] =
      step.run(backend, std::span<Primitive>(inputs.data(), step.arity), step.params, step.shape);
}

void run_steps_on(Backend& backend, const FusedProgram& program,
                  std::span<const std::int32_t> last_use, std::vector<Primitive>& values) {
  values.resize(program.leaves.size() + program.steps.size());
  for (std::size_t i = 0; i < program.steps.size(); ++i)
    run_step(backend, program, i, last_use, values);
}

std::vector<Primitive> run_steps(Backend& backend, const FusedProgram& program) {
  const std::vector<std::int32_t> last_use = last_uses(program);
  std::vector<Primitive> values(program.leaves);
  run_steps_on(backend, program, last_use, values);
  std::vector<Primitive> outputs;
  outputs.reserve(program.outputs.size());
  for (std::int32_t out : program.outputs) {
    outputs.push_back(std::move(values[program.leaves.size() + static_cast<std::size_t>(out)]));
  }
  return outputs;
}

std::string describe(const FusedProgram& program) {
  std::string text;
  std::int32_t v = 0;
  for (const Primitive& leaf : program.leaves) {
    // (Appended piece by piece: GCC 12 warns falsely on "literal" + std::to_string(...).)
    text.append("v").append(std::to_string(v++)).append(" = leaf ");
    text.append(dtype_name(leaf->dtype()))
        .append(" ")
        .append(leaf->shape().to_string())
        .append("\n");
  }
  for (std::size_t i = 0; i < program.steps.size(); ++i) {
    const FusedStep& step = program.steps[i];
    text.append("v").append(std::to_string(v++)).append(" = ").append(op_info(step.op).name);
    text.append("(");
    for (std::uint8_t k = 0; k < step.arity; ++k) {
      text.append(k ? ", v" : "v").append(std::to_string(step.inputs[k]));
    }
    if (step.dim() >= 0) text += ", dim " + std::to_string(step.dim());
    if (step.op == OpCode::random) text += distribution_text(step.params);
    text += ") " + std::string(dtype_name(step.dtype)) + " " + step.shape.to_string();
    for (std::size_t k = 0; k < program.outputs.size(); ++k) {
      if (program.outputs[k] != static_cast<std::int32_t>(i)) continue;
      text += " (written";
      if (const std::int32_t leaf = program.leaf_for_output(k); leaf >= 0) {
        text.append(" into v").append(std::to_string(leaf));
      }
      text += ")";
    }
    text += "\n";
  }
  return text;
}

std::uint64_t structure_hash(const FusedProgram& program) {
  std::uint64_t hash = 14695981039346656037ull;
  auto mix = [&](std::uint64_t value) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= (value >> (8 * byte)) & 0xff;
      hash *= 1099511628211ull;
    }
  };
  mix(program.shape.rank());
  for (const Primitive& leaf : program.leaves) {
    mix(static_cast<std::uint64_t>(leaf->dtype()));
    mix(leaf->rank());
    std::uint64_t broadcast = 0;
    for (std::size_t d = 0; d < leaf->rank() && d < 64; ++d) {
      if (leaf->shape()[d] == 1) broadcast |= std::uint64_t{1} << d;
    }
    mix(broadcast);
  }
  for (const FusedStep& step : program.steps) {
    mix(static_cast<std::uint64_t>(step.op));
    mix(static_cast<std::uint64_t>(step.dtype));
    mix(static_cast<std::uint64_t>(step.dim() + 1));
    if (step.op == OpCode::cast) mix(static_cast<std::uint64_t>(step.params.dtype));
    if (step.op == OpCode::random) mix(static_cast<std::uint64_t>(step.params.distribution.kind));
    for (std::uint8_t k = 0; k < step.arity; ++k) mix(static_cast<std::uint64_t>(step.inputs[k]));
  }
  for (std::int32_t out : program.outputs) mix(static_cast<std::uint64_t>(out));
  return hash;
}

bool is_head(OpCode op) noexcept { return op_info(op).product_head; }

double ProductSumSteps::alpha(const FusedProgram& program) const noexcept {
  const double scale =
      scale_step >= 0
          ? program.steps[static_cast<std::size_t>(scale_step)].params.scalars[0].to_double()
          : 1.0;
  return product_sign * scale;
}

ProductSumSteps product_sum_after(const FusedProgram& program, std::size_t head,
                                  std::span<const std::int32_t> last_use) {
  const FusedStep& product = program.steps[head];
  if (!is_float(product.dtype)) return {};
  const std::int32_t leaves = program.leaf_count();
  const auto shape_of = [&](std::int32_t v) -> const Shape& {
    return v < leaves ? program.leaves[static_cast<std::size_t>(v)]->shape()
                      : program.steps[static_cast<std::size_t>(v - leaves)].shape;
  };
  const auto dtype_of = [&](std::int32_t v) {
    return v < leaves ? program.leaves[static_cast<std::size_t>(v)]->dtype()
                      : program.steps[static_cast<std::size_t>(v - leaves)].dtype;
  };
  // Whether step i reads value v, is the only step that does (v is not an output either), and
  // keeps the product's dtype and shape.
  const auto only_reader = [&](std::size_t i, std::int32_t v) {
    const FusedStep& step = program.steps[i];
    return last_use[static_cast<std::size_t>(v)] == static_cast<std::int32_t>(i) &&
           (step.inputs[0] == v || (step.arity > 1 && step.inputs[1] == v)) &&
           step.dtype == product.dtype && step.shape == product.shape;
  };
  ProductSumSteps sum;
  std::int32_t v = leaves + static_cast<std::int32_t>(head);
  std::size_t i = head + 1;
  if (i < program.steps.size() && program.steps[i].op == OpCode::mul_scalar && only_reader(i, v)) {
    sum.scale_step = static_cast<std::int32_t>(i);
    v = leaves + static_cast<std::int32_t>(i++);
  }
  if (i < program.steps.size() && only_reader(i, v)) {
    const FusedStep& step = program.steps[i];
    const bool product_first = step.inputs[0] == v;
    const std::int32_t other = product_first ? step.inputs[1] : step.inputs[0];
    if ((step.op == OpCode::add || step.op == OpCode::sub) && other != v &&
        shape_of(other) == product.shape && dtype_of(other) == product.dtype) {
      sum.addend = other;
      if (step.op == OpCode::sub) (product_first ? sum.addend_sign : sum.product_sign) = -1.0;
      ++i;
    }
  }
  if (sum.scale_step < 0 && sum.addend < 0) return {};
  sum.end = i;
  return sum;
}

bool has_head(const FusedProgram& program) noexcept {
  for (const FusedStep& step : program.steps) {
    if (is_head(step.op)) return true;
  }
  return false;
}

std::vector<Primitive> run_heads_first(Backend& backend, const FusedProgram& program,
                                       RunProgram run_rest) {
  const std::size_t leaves = program.leaves.size(), steps = program.steps.size();
  // The values the other steps read, and the steps that are outputs.
  std::vector<bool> read(leaves + steps, false), output(steps, false);
  for (const FusedStep& step : program.steps) {
    if (is_head(step.op)) continue;
    for (std::uint8_t k = 0; k < step.arity; ++k)
      read[static_cast<std::size_t>(step.inputs[k])] = true;
  }
  for (std::int32_t out : program.outputs) output[static_cast<std::size_t>(out)] = true;
  // A leaf an output may be written into goes along too (the heads, run whole first, have read
  // what they read of it before anything is written there).
  for (std::size_t k = 0; k < program.outputs.size(); ++k) {
    if (const std::int32_t leaf = program.leaf_for_output(k); leaf >= 0) {
      read[static_cast<std::size_t>(leaf)] = true;
    }
  }
  // The heads, each whole.
  std::vector<Primitive> heads(steps);
  for (std::size_t s = 0; s < steps; ++s) {
    const FusedStep& step = program.steps[s];
    if (!is_head(step.op)) continue;
    std::array<Primitive, 3> inputs;
    for (std::uint8_t k = 0; k < step.arity; ++k) {
      const auto v = static_cast<std::size_t>(step.inputs[k]);
      if (v >= leaves) return run_steps(backend, program);
      inputs[k] = program.leaves[v];  // held: the caller's leaves stay valid
    }
    heads[s] =
        step.run(backend, std::span<Primitive>(inputs.data(), step.arity), step.params, step.shape);
  }
  // The other steps as a program of their own over the leaves they read: the caller's, then the
  // heads'. A head that is not an output is held by that program alone, so its runner may write
  // an output into its memory (cpu_fused.cpp); one that is an output is held here too.
  FusedProgram rest;
  rest.shape = program.shape;
  std::vector<std::int32_t> index(leaves + steps, -1);  // each value's index in rest
  for (std::size_t v = 0; v < leaves; ++v) {
    if (!read[v]) continue;
    index[v] = rest.leaf_count();
    rest.leaves.push_back(program.leaves[v]);
  }
  for (std::size_t s = 0; s < steps; ++s) {
    if (heads[s] == nullptr || !read[leaves + s]) continue;
    index[leaves + s] = rest.leaf_count();
    rest.leaves.push_back(output[s] ? heads[s] : std::move(heads[s]));
  }
  const std::int32_t rest_leaves = rest.leaf_count();
  for (std::size_t s = 0; s < steps; ++s) {
    if (is_head(program.steps[s].op)) continue;
    FusedStep step = program.steps[s];
    for (std::uint8_t k = 0; k < step.arity; ++k) {
      step.inputs[k] = index[static_cast<std::size_t>(step.inputs[k])];
    }
    index[leaves + s] = rest_leaves + static_cast<std::int32_t>(rest.steps.size());
    rest.steps.push_back(std::move(step));
  }
  // Each output: a head's value (-1 - its step), or one of rest's outputs.
  std::vector<std::int32_t> from;
  for (std::int32_t out : program.outputs) {
    if (is_head(program.steps[static_cast<std::size_t>(out)].op)) {
      from.push_back(-1 - out);
    } else {
      from.push_back(static_cast<std::int32_t>(rest.outputs.size()));
      rest.outputs.push_back(index[leaves + static_cast<std::size_t>(out)] - rest_leaves);
    }
  }
  std::vector<Primitive> computed;
  if (!rest.steps.empty()) {
    // A program's last step is always an output.
    const auto last = static_cast<std::int32_t>(rest.steps.size() - 1);
    if (std::find(rest.outputs.begin(), rest.outputs.end(), last) == rest.outputs.end()) {
      rest.outputs.push_back(last);
    }
    for (std::size_t k = 0; k < from.size(); ++k) {
      const std::int32_t leaf = program.leaf_for_output(k);
      if (leaf < 0 || from[k] < 0) continue;
      rest.write_into.resize(rest.outputs.size(), -1);
      rest.write_into[static_cast<std::size_t>(from[k])] = index[static_cast<std::size_t>(leaf)];
    }
    computed = run_rest(backend, rest);
  }
  std::vector<Primitive> outputs;
  outputs.reserve(from.size());
  for (std::int32_t f : from) {
    outputs.push_back(f >= 0 ? std::move(computed[static_cast<std::size_t>(f)])
                             : heads[static_cast<std::size_t>(-1 - f)]);
  }
  return outputs;
}

std::vector<Primitive> Backend::run_fused(const FusedProgram& program) {
  return run_steps(*this, program);
}

}  // namespace kiln
