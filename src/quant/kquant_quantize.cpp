// Encoding GGUF's Q4_K and Q6_K blocks with llama.cpp's reference algorithms
// (quantize_row_q4_K_ref and quantize_row_q6_K_ref in ggml-quants.c): each sub-block's scale
// (and Q4_K's min) chosen by a small search that minimises the weighted squared error, the
// scales themselves quantized to 6 or 8 bits against the block's f16 scale, then each value
// given its nearest code under the scale it will be decoded with. Inputs are finite (checked by
// the caller); every float-to-int conversion is held in range, so extreme inputs give poor codes,
// never undefined behaviour. The bytes need not match llama.cpp's (the searches' float sums may
// round differently); the decoder does match it bit for bit (kquant_dequantize.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/kernels.h"

namespace kiln::quant {
namespace {

constexpr int kValues = 256;
// Below this a sub-block's scale is taken as zero (llama.cpp's GROUP_MAX_EPS).
constexpr float kTiny = 1e-15f;

// Round half to even, as llama.cpp's nearest_int (a float addition of 1.5 * 2^23) does, held to
// its range; NaN counts as 0.
inline int nearest(float v) noexcept {
  if (!(v == v)) return 0;
  return static_cast<int>(std::nearbyint(std::clamp(v, -4194303.0f, 4194303.0f)));
}

// make_qkx2_quants: codes L in [0, nmax] for x with an affine scale and a min (returned as
// -min in the_min, >= 0), the pair chosen among nstep + 1 candidate ranges by the weighted
// squared error.
float affine_codes(int n, int nmax, const float* x, const float* weights, std::uint8_t* L,
                   float* the_min, float rmin, float rdelta, int nstep) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, std::uint8_t{0});
    *the_min = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<std::uint8_t>(std::clamp(nearest(iscale * (x[i] - min)), 0, nmax));
    const float diff = scale * L[i] + min - x[i];
    best_error += weights[i] * diff * diff;
  }
  std::uint8_t candidate[32];
  for (int step = 0; step <= nstep; ++step) {
    iscale = (rmin + rdelta * static_cast<float>(step) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest(iscale * (x[i] - min)), 0, nmax);
      candidate[i] = static_cast<std::uint8_t>(l);
      sum_l += weights[i] * static_cast<float>(l);
      sum_l2 += weights[i] * static_cast<float>(l * l);
      sum_xl += weights[i] * static_cast<float>(l) * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float error = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * candidate[i] + this_min - x[i];
      error += weights[i] * diff * diff;
    }
    if (error < best_error) {
      std::copy(candidate, candidate + n, L);
      best_error = error;
      scale = this_scale;
      min = this_min;
    }
  }
  *the_min = -min;
  return scale;
}

// make_qx_quants with rmse_type 1: symmetric codes in [-nmax, nmax - 1] for x, the scale chosen
// among 19 candidates by the squared error weighted by x^2. Returns the scale; L holds code +
// nmax.
float symmetric_codes(int n, int nmax, const float* x, std::int8_t* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < kTiny) {
    std::fill(L, L + n, std::int8_t{0});
    return 0.0f;
  }
  auto codes_for = [&](float iscale, float& sum_lx, float& sum_l2, bool keep) {
    sum_lx = 0;
    sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sum_lx += w * x[i] * static_cast<float>(l);
      sum_l2 += w * static_cast<float>(l * l);
      if (keep) L[i] = static_cast<std::int8_t>(l + nmax);
    }
  };
  float sum_lx, sum_l2;
  codes_for(-static_cast<float>(nmax) / max, sum_lx, sum_l2, true);
  float scale = sum_l2 != 0 ? sum_lx / sum_l2 : 0.0f;
  float best = scale * sum_lx;
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / max;
    codes_for(iscale, sum_lx, sum_l2, false);
    if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) {
      codes_for(iscale, sum_lx, sum_l2, true);
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

}  // namespace

void quantize_q4_k(const float* x, std::int64_t blocks, std::byte* out) {
  for (std::int64_t b = 0; b < blocks; ++b, x += kValues, out += 144) {
    std::uint8_t L[kValues];
    float weights[32];
    float scales[8];
    float mins[8];
    float max_scale = 0;
    float max_min = 0;
    for (int j = 0; j < 8; ++j) {
      const float* sub = x + 32 * j;
      float sum_x2 = 0;
      for (int l = 0; l < 32; ++l) sum_x2 += sub[l] * sub[l];
      const float average = std::sqrt(sum_x2 / 32);
      for (int l = 0; l < 32; ++l) weights[l] = average + std::fabs(sub[l]);
      scales[j] = affine_codes(32, 15, sub, weights, L + 32 * j, &mins[j], -1.0f, 0.1f, 20);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    // The sub-blocks' scales and mins as 6-bit multiples of the block's d and dmin, packed as
    // the decoder's scale_min reads them.
    const float inverse_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inverse_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    std::byte* packed = out + 4;
    std::memset(packed, 0, 12);
    for (int j = 0; j < 8; ++j) {
      const int ls = std::min(63, nearest(inverse_scale * scales[j]));
      const int lm = std::min(63, nearest(inverse_min * mins[j]));
      if (j < 4) {
        packed[j] = static_cast<std::byte>(ls);
        packed[j + 4] = static_cast<std::byte>(lm);
      } else {
        packed[j + 4] = static_cast<std::byte>((ls & 0xF) | ((lm & 0xF) << 4));
        packed[j - 4] |= static_cast<std::byte>((ls >> 4) << 6);
        packed[j] |= static_cast<std::byte>((lm >> 4) << 6);
      }
    }
    store_f16(out, max_scale / 63.0f);
    store_f16(out + 2, max_min / 63.0f);
    // Each value's code under the scale and min it decodes with.
    const float d = load_f16(out), dmin = load_f16(out + 2);
    for (int j = 0; j < 8; ++j) {
      int sc, mn;
      scale_min(packed, j, sc, mn);
      const float scale = d * static_cast<float>(sc);
      if (scale == 0) continue;
      const float offset = dmin * static_cast<float>(mn);
      for (int l = 0; l < 32; ++l) {
        L[32 * j + l] =
            static_cast<std::uint8_t>(std::clamp(nearest((x[32 * j + l] + offset) / scale), 0, 15));
      }
    }
    // Nibbles: each group of 64 values in 32 bytes, the first 32 in the low nibbles.
    std::byte* q = out + 16;
    for (int j = 0; j < kValues; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<std::byte>(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

void quantize_q6_k(const float* x, std::int64_t blocks, std::byte* out) {
  for (std::int64_t b = 0; b < blocks; ++b, x += kValues, out += 210) {
    std::int8_t L[kValues];
    float scales[16];
    float max_scale = 0;
    float max_abs_scale = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = symmetric_codes(16, 32, x + 16 * j, L + 16 * j);
      if (std::fabs(scales[j]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    std::memset(out, 0, 210);
    if (max_abs_scale < kTiny) continue;  // all codes 0 with d = 0: the block decodes to zeros
    // The sub-blocks' scales as int8 multiples of the block's d.
    const float iscale = -128.0f / max_scale;
    store_f16(out + 208, 1 / iscale);
    const float d = load_f16(out + 208);
    std::byte* sub_scales = out + 192;
    for (int j = 0; j < 16; ++j) {
      const int sc = std::clamp(nearest(iscale * scales[j]), -128, 127);
      sub_scales[j] = static_cast<std::byte>(static_cast<std::int8_t>(sc));
      const float scale = d * static_cast<float>(sc);
      if (scale == 0) continue;
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] =
            static_cast<std::int8_t>(std::clamp(nearest(x[16 * j + l] / scale), -32, 31) + 32);
      }
    }
    // Low nibbles in 128 bytes and high bit pairs in 64, as the decoder reads them.
    std::byte* low = out;
    std::byte* high = out + 128;
    for (int j = 0; j < kValues; j += 128, low += 64, high += 32) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
        low[l] = static_cast<std::byte>((q1 & 0xF) | ((q3 & 0xF) << 4));
        low[l + 32] = static_cast<std::byte>((q2 & 0xF) | ((q4 & 0xF) << 4));
        high[l] = static_cast<std::byte>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) |
                                         ((q4 >> 4) << 6));
      }
    }
  }
}

}  // namespace kiln::quant
