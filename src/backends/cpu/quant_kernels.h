// The SIMD kernels of the quantized products (quant_matvec.h), compiled for their targets
// (-O3; AVX-512 VNNI in quant_kernels.cpp, AVX2 in quant_kernels_avx2.cpp) and picked at run
// time: dot products of a row of a weight in a GGUF kind (all but Q8_K, llama.cpp's kind for
// activations) with one or four rows of x. quant_matvec.cpp drives them over rows and threads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/quant_matvec.h"

namespace kiln::cpu {

// Values per block of Q8_0 and Q4_0.
inline constexpr int kQuantBlock = 32;
// Rows of x a group kernel multiplies with a row of W at once.
inline constexpr int kQuantGroup = 4;

// out[i] = dot(row, xs[i]) for i < 1 or kQuantGroup rows; xs are int8 blocks (encode_row), or
// f32 rows for float_x_kernels.
using GroupDot = void (*)(const std::byte* row, const std::byte* const* xs, std::int64_t blocks,
                          float* out);

struct QuantKernels {
  GroupDot group = nullptr;  // kQuantGroup rows of x
  GroupDot one = nullptr;    // one row
  bool encoded = false;      // x as int8 blocks
};

// The kernels of kind for isa (Avx2 or Avx512, which the CPU has) on x encoded as int8 blocks:
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and Q2_K to Q6_K (the k-quants' rows a multiple of 256 values);
// empty (null kernels) for the others and for Scalar.
QuantKernels quant_kernels(QuantScheme::Kind kind, QuantIsa isa) noexcept;
// AVX2 kernels on f32 x, for rows of x that have no int8 code (NaN or infinity): Q8_0 and Q4_0
// (each block's codes widened to float); empty for the other kinds.
QuantKernels float_x_kernels(QuantScheme::Kind kind) noexcept;

// Bytes of a row of x of `blocks` blocks encoded for the int8 kernels (every kind's alike), and
// the encoding with isa's instructions (the same bytes on each): each block's int8 codes
// round(x / d), d = max |x| / 127 (halves away from zero, as kiln's int8 blocks), laid out as
// those kernels read them. The values must be finite.
std::int64_t encoded_row_bytes(std::int64_t blocks) noexcept;
void encode_row(const float* x, std::int64_t blocks, std::byte* out, QuantIsa isa) noexcept;

// Block b of a row encode_row wrote: its scale d, the sum of its codes and its 32 codes.
struct EncodedBlock {
  float scale = 0;
  std::int32_t sum = 0;
  const std::int8_t* codes = nullptr;
};
EncodedBlock encoded_block(const std::byte* row, std::int64_t b) noexcept;

}  // namespace kiln::cpu
