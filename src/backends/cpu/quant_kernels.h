// The SIMD kernels of the quantized products (quant_matvec.h), compiled for their targets here
// (-O3) and picked at run time: dot products of a row of a weight in a GGUF kind (all but
// Q8_K, llama.cpp's kind for activations) with one or four rows of x. quant_matvec.cpp drives them
// over rows and threads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/quant_matvec.h"

namespace kiln::cpu {

// Values per block of Q8_0 and Q4_0.
inline constexpr int kQuantBlock = 32;
// Rows of x a group kernel multiplies with a row of W at once.
inline constexpr int kQuantGroup = 4;

// out[i] = dot(row, xs[i]) for i < 1 or kQuantGroup rows; xs are f32 rows, or for the VNNI
// kernels int8 blocks.
using GroupDot = void (*)(const std::byte* row, const std::byte* const* xs, std::int64_t blocks,
                          float* out);

struct QuantKernels {
  GroupDot group = nullptr;  // kQuantGroup rows of x
  GroupDot one = nullptr;    // one row
  bool encoded = false;      // x as int8 blocks (the VNNI kernels)
};

// The kernels of kind for isa (Avx2 or Avx512, which the CPU has): Q8_0 and Q4_0 on both; Q4_1,
// Q5_0, Q5_1 and Q2_K to Q6_K on Avx512 (the k-quants' rows a multiple of 256 values); empty
// (null kernels) for the others.
QuantKernels quant_kernels(QuantScheme::Kind kind, QuantIsa isa) noexcept;

// Bytes of a row of x of `blocks` blocks encoded for the VNNI kernels (Q8_0's and Q4_0's alike),
// and the encoding: each block's int8 codes round(x / d), d = max |x| / 127 (halves away from
// zero, as kiln's int8 blocks), laid out as those kernels read them. The values must be finite.
std::int64_t encoded_row_bytes(std::int64_t blocks) noexcept;
void encode_row(const float* x, std::int64_t blocks, std::byte* out) noexcept;

// Block b of a row encode_row wrote: its scale d, the sum of its codes and its 32 codes.
struct EncodedBlock {
  float scale = 0;
  std::int32_t sum = 0;
  const std::int8_t* codes = nullptr;
};
EncodedBlock encoded_block(const std::byte* row, std::int64_t b) noexcept;

}  // namespace kiln::cpu
