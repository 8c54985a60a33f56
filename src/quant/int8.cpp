// kiln's symmetric int8 blocks: an f32 scale d = max|x| / 127 and codes round(x / d). Dividing
// (rather than multiplying by 1 / d as ggml's Q8_0 does) keeps subnormal scales exact.
#include <cmath>

#include "quant/blocks.h"
#include "quant/kernels.h"

namespace kiln::quant {

void dequantize_int8(const std::byte* in, std::int64_t blocks, std::int64_t values, float* out) {
  for (std::int64_t b = 0; b < blocks; ++b, in += 4 + values, out += values) {
    const float d = load_f32(in);
    for (std::int64_t j = 0; j < values; ++j)
      out[j] = static_cast<float>(static_cast<std::int8_t>(in[4 + j])) * d;
  }
}

void quantize_int8(const float* in, std::int64_t blocks, std::int64_t values, std::byte* out) {
  for (std::int64_t b = 0; b < blocks; ++b, in += values, out += 4 + values) {
    float amax = 0.0f;
    for (std::int64_t j = 0; j < values; ++j) amax = std::fmax(amax, std::fabs(in[j]));
    const float d = amax / 127.0f;
    std::memcpy(out, &d, 4);
    for (std::int64_t j = 0; j < values; ++j) {
      const float q = d != 0.0f ? std::round(in[j] / d) : 0.0f;
      out[4 + j] = static_cast<std::byte>(
          static_cast<std::int8_t>(std::fmax(-127.0f, std::fmin(127.0f, q))));
    }
  }
}

}  // namespace kiln::quant
