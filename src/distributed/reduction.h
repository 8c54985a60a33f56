// Element-wise reductions of host buffers, for the communicators: out[i] = a[i] (op) b[i].
#pragma once

#include <cstddef>

#include "kiln/dtype.h"
#include "kiln/options.h"

namespace kiln::distributed {

// n elements; out may be a or b. Integer sums wrap around (two's complement), as integer
// kernels do; max and min propagate NaN.
using ReduceFunction = void (*)(void* out, const void* a, const void* b, std::size_t n);

// The function for elements of dtype (f64, f32 or an integer dtype) and operation (Sum, Max or
// Min); UnsupportedDType or InvalidArgument naming op otherwise.
ReduceFunction reduce_function(DType dtype, ReduceOperation operation, const char* op);

}  // namespace kiln::distributed
