// The elementwise kernel family. An op is described by a value (ElementwiseOp): the C
// expression of one element in terms of the operands' compute values (a, b, c), the scalars
// (s0..s3), the flat index (i) and an error flag (err); the generator wraps it in a kernel that
// walks any shapes and strides (broadcast, transposed, sliced, flipped views) and takes a flat
// fast path when every operand is contiguous. One kernel is generated, compiled and cached per
// distinct description.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backends/cuda/runtime.h"

namespace kiln::cuda {

inline constexpr std::size_t kMaxOperands = 4;  // the output and up to three inputs
inline constexpr std::size_t kMaxDims = 12;     // after merging dims that are contiguous together

struct ElementwiseOp {
  const char* name = "";           // the kiln op, for keys and error messages
  std::string expression;          // e.g. "k_add(a, b)"
  std::vector<DType> inputs;       // dtype of each tensor operand
  DType value_dtype = DType::F32;  // dtype whose compute type the expression yields
  DType output = DType::F32;       // converted to this with kiln's cast semantics
  std::vector<DType> scalars;      // compute type of s0, s1, ... (raw 64-bit words at launch)
  const char* failure = nullptr;   // what err means, when the expression can set it
  // An input that is not loaded before the expression: the expression reads it with
  // GATHER(extra), at the loop's position plus extra elements (gather, select).
  int gathered_input = -1;
};

// Generated source of op (exposed for tests that compile every kernel without a GPU).
std::string elementwise_source(const ElementwiseOp& op);

// Runs op writing out (any strides; its shape is the iteration shape); inputs broadcast to it.
void launch_elementwise(Runtime& runtime, const ElementwiseOp& op, const CudaTensor& out,
                        std::span<const CudaTensor* const> inputs,
                        std::span<const std::uint64_t> scalar_bits = {});

// A scalar in the raw 64-bit form launch_elementwise takes, as the compute type of dtype.
std::uint64_t scalar_bits(double value, DType dtype);
std::uint64_t scalar_bits_int(std::int64_t value);

}  // namespace kiln::cuda
