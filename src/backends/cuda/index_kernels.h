// Elementwise descriptions of the ops that produce positions (header-only, so the codegen test
// compiles exactly these):
//   arange:   element i = start + i * step (s0, s1) in i64 with the wrap-around of the host
//             default (src/contract/defaults/creation.cpp), converted to dtype as a cast converts
//             (the CPU's convert_element);
//   random:   element i = the distribution's value at counter s1 + i of seed s0 (the CPU
//             backend's counter-based hash, src/backends/cpu/random.h; kernel_source.cpp's
//             k_uniform01, k_normal), s2 and s3 the distribution's a and b. i is the flat index
//             of the iteration shape in every kernel, a fused group's included, so a random step
//             captured into a fused kernel draws the values its eager kernel draws;
//   unravel:  argwhere's coordinate along one dim from a flat row-major position (a):
//             (a / stride of the dim) % size of the dim (s0, s1), converted to the index dtype
//             (the CPU's static_cast).
#pragma once

#include "backends/cuda/elementwise.h"
#include "kiln/distribution.h"

namespace kiln::cuda {

inline ElementwiseOp arange_op(DType dtype) {
  return {"arange", "(i64)((u64)s0 + (u64)i * (u64)s1)",
          {},       DType::I64,
          dtype,    {DType::I64, DType::I64},
          nullptr};
}

inline ElementwiseOp random_op(Distribution::Kind kind, DType dtype) {
  const char* expression = "";
  switch (kind) {
    case Distribution::Kind::Default:
      expression = "k_uniform01(s0, s1 + (u64)i)";
      break;
    case Distribution::Kind::Uniform:
      expression = is_int(dtype) || is_bool(dtype)
                       ? "floor(s2 + (s3 - s2) * k_uniform01(s0, s1 + (u64)i))"
                       : "s2 + (s3 - s2) * k_uniform01(s0, s1 + (u64)i)";
      break;
    case Distribution::Kind::Normal:
      expression = "s2 + s3 * k_normal(s0, s1 + (u64)i)";
      break;
    case Distribution::Kind::Bernoulli:
      expression = "(k_uniform01(s0, s1 + (u64)i) < s2 ? 1.0 : 0.0)";
      break;
  }
  return {"random",   expression, {},
          DType::F64, dtype,      {DType::U64, DType::U64, DType::F64, DType::F64},
          nullptr};
}

inline ElementwiseOp unravel_op(DType index_dtype) {
  return {"argwhere",  "(a / s0) % s1",          {DType::I64}, DType::I64,
          index_dtype, {DType::I64, DType::I64}, nullptr};
}

}  // namespace kiln::cuda
