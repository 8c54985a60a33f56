// FusedProgram: a group of recorded ops that the fusion decorator (src/decorators/fusion/) hands
// to its inner backend to run at once. Leaves are the inner backend's own tensors; each step is
// one op of ops.def applied to earlier values, so a backend that cannot fuse still runs the group
// correctly step by step (run_steps, the default of Backend::run_fused), and one that can (the
// CPU over cache-sized tiles, cpu_fused.cpp) runs the same steps on pieces of the iteration space.
//
//   values: [leaf 0, ..., leaf L-1, step 0, ..., step S-1]; step i reads values before L + i.
// A step may read no value: random, whose numbers were reserved when it was recorded
// (StepParams::stream), so that the group draws what the op would have drawn at its call.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "contract/op_code.h"
#include "contract/random_stream.h"
#include "kiln/distribution.h"
#include "kiln/primitive.h"
#include "kiln/scalar.h"

namespace kiln {

class Backend;

// The arguments of a recorded op that are not tensors: its scalars (add_scalar's value, clamp's
// bounds), its dim, its target dtype (cast), random's distribution and the place in the device's
// random stream reserved for it when it was called. Values, not part of a program's structure
// (but for the distribution's kind, which changes random's kernel).
struct StepParams {
  std::array<Scalar, 2> scalars{};
  // For an op along a dim (impl F of form DIM, softmax...): the dim whose lines it reads whole;
  // -1 for an elementwise op.
  std::int64_t dim = -1;
  DType dtype = DType::F32;
  Distribution distribution{};
  // random's value at flat index i of its shape is the stream's value first + i.
  RandomStream stream{};
};

// Runs one recorded op on a backend, its inputs moved in, for a result of shape (what an op
// without tensor inputs, random, needs; the others' results have their inputs' shapes).
using StepRun = Primitive (*)(Backend&, std::span<Primitive>, const StepParams&, const Shape&);

struct FusedStep {
  OpCode op{};
  DType dtype = DType::F32;
  Shape shape;
  StepParams params;
  std::uint8_t arity = 0;
  std::array<std::int32_t, 3> inputs{};  // value indices
  StepRun run = nullptr;

  std::int64_t dim() const noexcept { return params.dim; }
};

struct FusedProgram {
  std::vector<Primitive> leaves;
  std::vector<FusedStep> steps;
  // The steps whose values run_fused returns, in this order (the last step always among them).
  std::vector<std::int32_t> outputs;
  // Empty, or per output: a leaf the backend may write that output into instead of new memory
  // (-1: none), returning that leaf as the output (a backend that does not returns new memory,
  // as without it). The fusion decorator offers one for an assign whose source is the group's
  // value (an optimizer's update of a parameter in place): the leaf is dense, of the output's
  // dtype and shape, nothing reads its old values after the group, no step works along a dim (or,
  // for an output of a reduction's epilogue, only epilogue steps read the leaf's values), and
  // every other leaf on its storage is the same view; so a kernel that reads an element's inputs
  // before it writes the element may write there. Not part of the structure (a kernel is the
  // same; only where it writes differs).
  std::vector<std::int32_t> write_into;
  // The iteration shape: every step's shape is this one, or this one with the dims an op along
  // a dim reduced set to 1 (a reduction's result, and the elementwise steps after it, its
  // epilogue, where the backend fuses those: Backend::fuses_reduction_epilogues); a leaf's shape
  // broadcasts to it.
  Shape shape;

  std::int32_t leaf_count() const noexcept { return static_cast<std::int32_t>(leaves.size()); }
  // The leaf output k may be written into (write_into), or -1.
  std::int32_t leaf_for_output(std::size_t k) const noexcept {
    return k < write_into.size() ? write_into[k] : -1;
  }
};

// The program run step by step on backend: each step's inputs handed over at their last use,
// so an intermediate is freed (or its memory reused by the next op) as soon as nothing needs it.
std::vector<Primitive> run_steps(Backend& backend, const FusedProgram& program);

// The program as text, one value per line ("v3 = add(v0, v2) f32 [64, 300]"), for messages.
std::string describe(const FusedProgram& program);
// A hash of the program's structure: its ops, their dtypes, dims and wiring, the leaves' dtypes
// and which of their dims broadcast. Shapes' sizes and scalars are not part of it, so one
// kernel compiled for the key serves every size (the CUDA backend's cache key).
std::uint64_t structure_hash(const FusedProgram& program);

// For each value, the last step that reads it (the outputs: past every step; -1: never read).
std::vector<std::int32_t> last_uses(const FusedProgram& program);
// Runs step i on values (which holds every value before it), each input handed over at its last
// use (last_use: last_uses(program)), and stores its result in values.
void run_step(Backend& backend, const FusedProgram& program, std::size_t i,
              std::span<const std::int32_t> last_use, std::vector<Primitive>& values);
// The steps on values, whose first leaf_count() entries hold the leaves: fills the rest. (A
// backend that runs the program on pieces draws a random step's piece itself: its run draws the
// whole shape.)
void run_steps_on(Backend& backend, const FusedProgram& program,
                  std::span<const std::int32_t> last_use, std::vector<Primitive>& values);

// A product (impl H in ops.def: matmul, linear): a group's head. The fusion decorator computes a
// head's inputs when it records it, so a head reads only leaves; a backend runs it first, whole,
// and may run the steps after it as its epilogue (the CUDA backend: a bias and an activation in
// cuBLASLt's call).
bool is_head(OpCode op) noexcept;
bool has_head(const FusedProgram& program) noexcept;

// A product's scale and sum recorded after it, alpha · product + beta · addend: a BLAS call's
// alpha and beta, so an optimizer's update of a weight (w - lr · xᵀ·dy) is one product call. Step
// `head` is the product; the step after it may be mul_scalar (alpha its scalar), the one after
// that add or sub with a value of the product's dtype and shape, not broadcast (beta ±1); each
// value read there alone. end == 0: no such steps.
struct ProductSumSteps {
  std::size_t end = 0;           // steps [head, end)
  std::int32_t scale_step = -1;  // mul_scalar's step, -1: none
  std::int32_t addend = -1;      // the value summed, -1: none
  double product_sign = 1.0;
  double addend_sign = 1.0;

  // alpha and beta for program (whose scalars may differ from the program matched).
  double alpha(const FusedProgram& program) const noexcept;
  double beta() const noexcept { return addend >= 0 ? addend_sign : 0.0; }
};
// last_use: last_uses(program).
ProductSumSteps product_sum_after(const FusedProgram& program, std::size_t head,
                                  std::span<const std::int32_t> last_use);

// Runs program's heads on backend, each whole, then the other steps through run_rest (the
// backend's own runner for programs without heads), whose program takes the heads' values as
// leaves after program's own; returns program's outputs in its order. A program whose head reads
// a step's value (never recorded so) runs step by step.
using RunProgram = std::vector<Primitive> (*)(Backend&, const FusedProgram&);
std::vector<Primitive> run_heads_first(Backend& backend, const FusedProgram& program,
                                       RunProgram run_rest);

}  // namespace kiln
