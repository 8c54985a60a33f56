// Matrix-vector products with quantized weights: y = W x for a QFloat weight W of shape
// [rows, cols] in Q8_0 or Q4_0 and float x of cols values, rows spread over kiln's threads.
// With AVX-512 VNNI, x is encoded as int8 blocks of 32 (an f32 scale each, as llama.cpp encodes
// activations) and each block's dot product is an int8 multiply-add: every product then differs
// from the dequantized float product by at most sum_k |W[r, k]| * d_x(k) / 2, d_x(k) being the
// scale of x's block holding k (max |x| of the block / 127). The AVX2 and scalar kernels widen
// the codes to float and multiply with x itself. bench/quant_bench.cpp measures them against a
// memcpy.
#pragma once

#include <cstdint>
#include <span>

#include "kiln/data.h"

namespace kiln::cpu {

// The instruction sets a kernel is written for, widest last (Avx512: with VNNI and VL).
enum class QuantIsa : std::uint8_t { Scalar, Avx2, Avx512 };

// The widest the running CPU has (chosen once, at the first call).
QuantIsa best_quant_isa() noexcept;
// Whether the running CPU can run isa.
bool cpu_has(QuantIsa isa) noexcept;

// y[r] = sum_k W[r, k] x[k]. UnsupportedOperation unless weight is QFloat in Q8_0 or Q4_0,
// ShapeMismatch unless it is 2-D with x.size() == cols and y.size() == rows; InvalidArgument
// for a NaN or infinite x, or an isa the CPU lacks.
void quantized_matvec(const TensorData& weight, std::span<const float> x, std::span<float> y,
                      QuantIsa isa = best_quant_isa());

}  // namespace kiln::cpu
