// The reduction family: a value of x's elements along one dim, kept with size 1. One generated
// module per (reducer, dtypes) with three entry points: a thread per output (short or strided
// lines), a block per output or per chunk of a long line, and the pass that combines chunks.
// Floats accumulate in double and integers in wrapping 64-bit arithmetic, as on the CPU.
#pragma once

#include <string>

#include "backends/cuda/runtime.h"

namespace kiln::cuda {

enum class Reducer { Sum, Mean, Prod, Max, Min, ArgMax, ArgMin, Any, All };

// Reduces x along dim into a new tensor of out_dtype (the index dtype for ArgMax/ArgMin, Bool
// for Any/All, x's dtype otherwise).
TensorPtr reduce_dim(Runtime& runtime, const CudaTensor& x, std::int64_t dim, Reducer reducer,
                     DType out_dtype, const char* op);

// Generated source of a reducer (exposed for tests that compile every kernel without a GPU).
std::string reduce_kernel_source(Reducer reducer, DType dtype, DType out_dtype);

}  // namespace kiln::cuda
