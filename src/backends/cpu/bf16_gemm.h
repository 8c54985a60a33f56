// bf16 matrix products on oneDNN's matmul primitive, where the CPU has bf16 dot-product
// instructions (AVX512_BF16: twice f32's multiply-adds per cycle, on the development machine's
// Zen 5 540 GFLOP/s on one core against 258 for f32). Products accumulate in f32 and are
// rounded to bf16 once, as the f32 path kiln uses otherwise does.
#pragma once

#include <cstdint>

#include "backends/cpu/gemm.h"
#include "kiln/half.h"

namespace kiln::cpu {

// c (row-major, row stride ldc) = a b (+ bias, f32 or bf16 per column, when given), for a and b
// with any strides oneDNN reads (unit stride along one dim). Returns false, having written
// nothing, when kiln was built without oneDNN, the CPU lacks bf16 instructions, or oneDNN
// refuses the layout: the caller then takes its f32 path.
bool bf16_gemm(MatrixRef<const bfloat16> a, MatrixRef<const bfloat16> b, bfloat16* c,
               std::int64_t ldc, const bfloat16* bias = nullptr);

}  // namespace kiln::cpu
