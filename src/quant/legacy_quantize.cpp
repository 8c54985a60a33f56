// Encoding GGUF's 32-value blocks the way llama.cpp's reference quantizers do (and the gguf
// Python package, which reproduces them): the same float operations in the same order, so the
// bytes agree with theirs. Inputs are finite (checked by the caller); a scale too small for its
// reciprocal to be finite still gives codes in range, never an out-of-range conversion.
#include <cmath>

#include "quant/blocks.h"
#include "quant/kernels.h"

namespace kiln::quant {
namespace {

constexpr int kValues = 32;
constexpr int kHalf = kValues / 2;

// (int)v as C truncates, held to [0, high]; NaN (from 0 * inf) counts as 0.
inline int truncate_code(float v, int high) noexcept {
  if (!(v > 0.0f)) return 0;
  if (v >= static_cast<float>(high)) return high;
  return static_cast<int>(v);
}

// The value of largest magnitude, the first one on ties, with its sign.
inline float signed_absmax(const float* x) noexcept {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < kValues; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

inline void min_max(const float* x, float& min, float& max) noexcept {
  min = x[0];
  max = x[0];
  for (int j = 1; j < kValues; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
}

// roundf(v) (halves away from zero) held to [-127, 127]; NaN counts as 0.
inline std::byte round_code(float v) noexcept {
  const float q = v == v ? std::round(v) : 0.0f;
  return static_cast<std::byte>(static_cast<std::int8_t>(std::fmax(-127.0f, std::fmin(127.0f, q))));
}

inline float reciprocal(float d) noexcept { return d != 0.0f ? 1.0f / d : 0.0f; }

// Codes of 4 or 5 bits into nibbles (and the high-bit word when `high` is given).
void pack(const int* codes, std::byte* nibbles, std::byte* high) noexcept {
  std::uint32_t bits = 0;
  for (int j = 0; j < kHalf; ++j) {
    nibbles[j] = static_cast<std::byte>((codes[j] & 0x0F) | ((codes[j + kHalf] & 0x0F) << 4));
    bits |= static_cast<std::uint32_t>((codes[j] >> 4) & 1) << j;
    bits |= static_cast<std::uint32_t>((codes[j + kHalf] >> 4) & 1) << (j + kHalf);
  }
  if (high != nullptr) std::memcpy(high, &bits, 4);
}

// Q4_0 and Q5_0: symmetric about the signed extreme, which maps to code 0.
void quantize_symmetric(const float* in, std::int64_t blocks, std::byte* out, int levels,
                        std::int64_t bytes) {
  const float offset = static_cast<float>(levels / 2) + 0.5f;
  for (std::int64_t b = 0; b < blocks; ++b, in += kValues, out += bytes) {
    const float d = signed_absmax(in) / -static_cast<float>(levels / 2);
    const float id = reciprocal(d);
    store_f16(out, d);
    int codes[kValues];
    for (int j = 0; j < kValues; ++j) codes[j] = truncate_code(in[j] * id + offset, levels - 1);
    pack(codes, out + bytes - kHalf, levels > 16 ? out + 2 : nullptr);
  }
}

// Q4_1 and Q5_1: min to max over the levels.
void quantize_affine(const float* in, std::int64_t blocks, std::byte* out, int levels,
                     std::int64_t bytes) {
  for (std::int64_t b = 0; b < blocks; ++b, in += kValues, out += bytes) {
    float min;
    float max;
    min_max(in, min, max);
    const float d = (max - min) / static_cast<float>(levels - 1);
    const float id = reciprocal(d);
    store_f16(out, d);
    store_f16(out + 2, min);
    int codes[kValues];
    for (int j = 0; j < kValues; ++j)
      codes[j] = truncate_code((in[j] - min) * id + 0.5f, levels - 1);
    pack(codes, out + bytes - kHalf, levels > 16 ? out + 4 : nullptr);
  }
}

}  // namespace

void quantize_q4_0(const float* in, std::int64_t blocks, std::byte* out) {
  quantize_symmetric(in, blocks, out, 16, 18);
}
void quantize_q5_0(const float* in, std::int64_t blocks, std::byte* out) {
  quantize_symmetric(in, blocks, out, 32, 22);
}
void quantize_q4_1(const float* in, std::int64_t blocks, std::byte* out) {
  quantize_affine(in, blocks, out, 16, 20);
}
void quantize_q5_1(const float* in, std::int64_t blocks, std::byte* out) {
  quantize_affine(in, blocks, out, 32, 24);
}

void quantize_q8_0(const float* in, std::int64_t blocks, std::byte* out) {
  for (std::int64_t b = 0; b < blocks; ++b, in += kValues, out += 34) {
    float amax = 0.0f;
    for (int j = 0; j < kValues; ++j) amax = std::fmax(amax, std::fabs(in[j]));
    const float d = amax / 127.0f;
    const float id = reciprocal(d);
    store_f16(out, d);
    for (int j = 0; j < kValues; ++j) out[2 + j] = round_code(in[j] * id);
  }
}

}  // namespace kiln::quant
