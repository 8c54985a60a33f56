// Products with quantized weights: out = x Wᵀ for a QFloat weight W [rows, cols] (its blocks run
// along cols, the product's inner dim, as a linear layer's [out, in] weight stores them) and
// `batch` rows of f32 x, rows of W spread over kiln's threads.
//
// Every GGUF kind of weights but Q8_K runs on the blocks with AVX2 or AVX-512 VNNI: x is encoded
// as int8 blocks of 32 (an f32 scale each, as llama.cpp encodes activations) and each block's
// dot product is an int8 multiply-add (VNNI's, or AVX2's byte products summed in pairs): every
// product then differs from the dequantized float product by at most
// sum_k |W[r, k]| * d_x(k) / 2, d_x(k) being the scale of x's block holding k (max |x| of the
// block / 127). The kernels take up to four rows of x per pass over a row of W, so a batch reads
// W from memory once per 64 rows of x. A row of x holding NaN or infinity has no int8 code: Q8_0
// and Q4_0 multiply it in float (the codes widened), the other kinds on decoded tiles. Q8_K, and
// the Scalar "instruction set", decode a few rows of W at a time to f32 (in cache) and multiply
// them with gemm: W is never decoded whole. bench/quant_bench.cpp measures the kernels against a
// memcpy.
#pragma once

#include <cstdint>
#include <span>

#include "kiln/data.h"

namespace kiln::cpu {

// The instruction sets a kernel is written for, widest last (Avx512: with BW, VL, VNNI, VBMI and
// GFNI, as Ice Lake and Zen 4 on have them).
enum class QuantIsa : std::uint8_t { Scalar, Avx2, Avx512 };

// The widest the running CPU has (chosen once, at the first call).
QuantIsa best_quant_isa() noexcept;
// Whether the running CPU can run isa.
bool cpu_has(QuantIsa isa) noexcept;
// Whether the product with a weight of kind rounds x to int8 blocks of 32 (scale max |x| / 127,
// as kiln's int8 blocks) on isa: the AVX2 and VNNI kernels of every GGUF kind of weights (not
// Q8_K). The other products are f32 sums of the decoded weight.
bool rounds_x_to_int8(QuantScheme::Kind kind, QuantIsa isa = best_quant_isa()) noexcept;

// A QFloat matrix [rows, cols]: scheme's blocks, row after row (cols a whole number of blocks).
struct QuantMatrix {
  QuantScheme scheme;
  const std::byte* blocks = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
};

// out[m * rows + r] = sum_k W[r, k] x[m * cols + k] for every row r of W and m < batch. isa must
// be one the CPU has.
void quantized_matmul(const QuantMatrix& w, const float* x, std::int64_t batch, float* out,
                      QuantIsa isa = best_quant_isa());

// y = W x for QFloat data W [rows, cols]: ShapeMismatch unless W is 2-D with x.size() == cols
// and y.size() == rows, DTypeMismatch unless it is QFloat; InvalidArgument for a NaN or infinite
// x, or an isa the CPU lacks.
void quantized_matvec(const TensorData& weight, std::span<const float> x, std::span<float> y,
                      QuantIsa isa = best_quant_isa());

}  // namespace kiln::cpu
