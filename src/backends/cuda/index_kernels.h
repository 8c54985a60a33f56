// Elementwise descriptions of the ops that produce positions (header-only, so the codegen test
// compiles exactly these):
//   arange:   element i = start + i * step (s0, s1) in i64 with the wrap-around of the host
//             default (src/contract/defaults/creation.cpp), converted to dtype as a cast converts
//             (the CPU's convert_element);
//   unravel:  argwhere's coordinate along one dim from a flat row-major position (a):
//             (a / stride of the dim) % size of the dim (s0, s1), converted to the index dtype
//             (the CPU's static_cast).
#pragma once

#include "backends/cuda/elementwise.h"

namespace kiln::cuda {

inline ElementwiseOp arange_op(DType dtype) {
  return {"arange", "(i64)((u64)s0 + (u64)i * (u64)s1)",
          {},       DType::I64,
          dtype,    {DType::I64, DType::I64},
          nullptr};
}

inline ElementwiseOp unravel_op(DType index_dtype) {
  return {"argwhere",  "(a / s0) % s1",          {DType::I64}, DType::I64,
          index_dtype, {DType::I64, DType::I64}, nullptr};
}

}  // namespace kiln::cuda
