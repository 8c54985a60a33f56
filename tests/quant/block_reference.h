// Float64 references of GGUF's block formulas for the quantization tests, written from the
// format's description loop by loop (as llama.cpp's reference walks a block), independently of
// src/quant's per-value indexing; and random blocks with finite scales to feed them.
#pragma once

#include <kiln/half.h>
#include <kiln/options.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace kiln::quant_testing {

using Kind = QuantScheme::Kind;

struct Layout {
  int values;
  int bytes;
};

inline Layout layout(Kind kind) {
  switch (kind) {
    case Kind::Q4_0:
      return {32, 2 + 16};
    case Kind::Q4_1:
      return {32, 2 + 2 + 16};
    case Kind::Q5_0:
      return {32, 2 + 4 + 16};
    case Kind::Q5_1:
      return {32, 2 + 2 + 4 + 16};
    case Kind::Q8_0:
      return {32, 2 + 32};
    case Kind::Q2_K:
      return {256, 16 + 64 + 2 + 2};
    case Kind::Q3_K:
      return {256, 32 + 64 + 12 + 2};
    case Kind::Q4_K:
      return {256, 2 + 2 + 12 + 128};
    case Kind::Q5_K:
      return {256, 2 + 2 + 12 + 32 + 128};
    case Kind::Q6_K:
      return {256, 128 + 64 + 16 + 2};
    case Kind::Q8_K:
      return {256, 4 + 256 + 32};
    default:
      return {0, 0};
  }
}

// Byte offsets of a block's f16 scales.
inline std::vector<int> f16_fields(Kind kind) {
  switch (kind) {
    case Kind::Q4_0:
    case Kind::Q5_0:
    case Kind::Q8_0:
      return {0};
    case Kind::Q4_1:
    case Kind::Q5_1:
    case Kind::Q4_K:
    case Kind::Q5_K:
      return {0, 2};
    case Kind::Q2_K:
      return {80, 82};
    case Kind::Q3_K:
      return {108};
    case Kind::Q6_K:
      return {208};
    default:
      return {};
  }
}

// Random blocks: random bytes, with every f16 scale finite (exponent field below 31) and Q8_K's
// f32 scale a finite value of modest size.
inline std::vector<std::byte> random_blocks(Kind kind, int blocks, std::mt19937& rng) {
  const Layout l = layout(kind);
  std::vector<std::byte> bytes(static_cast<std::size_t>(l.bytes) * blocks);
  for (std::byte& b : bytes) b = static_cast<std::byte>(rng() & 0xff);
  for (int b = 0; b < blocks; ++b) {
    std::byte* block = bytes.data() + static_cast<std::ptrdiff_t>(b) * l.bytes;
    for (int at : f16_fields(kind)) {
      std::uint16_t bits = static_cast<std::uint16_t>(rng());
      if (((bits >> 10) & 0x1f) == 0x1f) bits &= 0xbfff;  // clear the exponent's top bit
      std::memcpy(block + at, &bits, 2);
    }
    if (kind == Kind::Q8_K) {
      const float d = std::uniform_real_distribution<float>(-4.0f, 4.0f)(rng);
      std::memcpy(block, &d, 4);
    }
  }
  return bytes;
}

inline std::uint8_t u8(const std::byte* p, int i) { return static_cast<std::uint8_t>(p[i]); }
inline double f16(const std::byte* p, int at) {
  std::uint16_t bits;
  std::memcpy(&bits, p + at, 2);
  return static_cast<double>(static_cast<float>(half::from_bits(bits)));
}

// The 6-bit scale and min of sub-block j of a Q4_K or Q5_K block, unpacked from its 12 bytes at
// offset 4 as the format describes the packing.
inline void k4_scale_min(const std::byte* block, int j, int& scale, int& min) {
  const std::byte* s = block + 4;
  if (j < 4) {
    scale = u8(s, j) & 63;
    min = u8(s, j + 4) & 63;
  } else {
    scale = (u8(s, j + 4) & 0xf) | ((u8(s, j - 4) >> 6) << 4);
    min = (u8(s, j + 4) >> 4) | ((u8(s, j) >> 6) << 4);
  }
}

// One block of `kind` decoded in float64.
inline std::vector<double> reference_block(Kind kind, const std::byte* x) {
  std::vector<double> y(static_cast<std::size_t>(layout(kind).values));
  switch (kind) {
    case Kind::Q4_0:
    case Kind::Q4_1:
    case Kind::Q5_0:
    case Kind::Q5_1: {
      const bool has_min = kind == Kind::Q4_1 || kind == Kind::Q5_1;
      const bool five = kind == Kind::Q5_0 || kind == Kind::Q5_1;
      const double d = f16(x, 0);
      const double m = has_min ? f16(x, 2) : 0.0;
      const int high_at = has_min ? 4 : 2;
      const int qs_at = high_at + (five ? 4 : 0);
      std::uint32_t qh = 0;
      if (five) std::memcpy(&qh, x + high_at, 4);
      const int offset = has_min ? 0 : (five ? 16 : 8);
      for (int j = 0; j < 16; ++j) {
        const int lo =
            (u8(x, qs_at + j) & 0x0f) | (five ? static_cast<int>((qh >> j) & 1) << 4 : 0);
        const int hi =
            (u8(x, qs_at + j) >> 4) | (five ? static_cast<int>((qh >> (j + 16)) & 1) << 4 : 0);
        // Only the kinds with a minimum add it: + 0.0 would turn -0 (code 8 times a negative
        // scale) into +0.
        y[j] = has_min ? d * lo + m : d * (lo - offset);
        y[j + 16] = has_min ? d * hi + m : d * (hi - offset);
      }
      break;
    }
    case Kind::Q8_0:
      for (int j = 0; j < 32; ++j) y[j] = f16(x, 0) * static_cast<std::int8_t>(u8(x, 2 + j));
      break;
    case Kind::Q2_K: {
      const double d = f16(x, 80), dmin = f16(x, 82);
      int out = 0, is = 0;
      for (int n = 0; n < 2; ++n) {  // two halves of 128 values, 32 bytes of q each
        const int q = 16 + 32 * n;
        for (int shift = 0; shift < 8; shift += 2) {
          for (int half16 = 0; half16 < 2; ++half16) {
            const int sc = u8(x, is++);
            for (int l = 0; l < 16; ++l) {
              const int v = (u8(x, q + 16 * half16 + l) >> shift) & 3;
              y[out++] = d * (sc & 0xf) * v - dmin * (sc >> 4);
            }
          }
        }
      }
      break;
    }
    case Kind::Q3_K: {
      // Unpack the 16 six-bit scales from 12 bytes the way the format packs them.
      int scales[16];
      for (int j = 0; j < 16; ++j) {
        const int low = j < 8 ? (u8(x, 96 + j) & 0xf) : (u8(x, 96 + j - 8) >> 4);
        const int high = (u8(x, 96 + 8 + j % 4) >> (2 * (j / 4))) & 3;
        scales[j] = (low | (high << 4)) - 32;
      }
      const double d = f16(x, 108);
      int out = 0, is = 0;
      std::uint8_t m = 1;
      for (int n = 0; n < 2; ++n) {
        const int q = 32 + 32 * n;
        for (int shift = 0; shift < 8; shift += 2, m = static_cast<std::uint8_t>(m << 1)) {
          for (int half16 = 0; half16 < 2; ++half16) {
            const double dl = d * scales[is++];
            for (int l = 16 * half16; l < 16 * half16 + 16; ++l) {
              const int low = (u8(x, q + l) >> shift) & 3;
              y[out++] = dl * (low - ((u8(x, l) & m) ? 0 : 4));
            }
          }
        }
      }
      break;
    }
    case Kind::Q4_K:
    case Kind::Q5_K: {
      const bool five = kind == Kind::Q5_K;
      const double d = f16(x, 0), dmin = f16(x, 2);
      auto scale_min = [&](int j, int& sc, int& mn) { k4_scale_min(x, j, sc, mn); };
      const int qs = five ? 48 : 16;
      int out = 0;
      for (int j = 0; j < 4; ++j) {  // 64 values per step: low nibbles, then high nibbles
        for (int part = 0; part < 2; ++part) {
          int sc, mn;
          scale_min(2 * j + part, sc, mn);
          for (int l = 0; l < 32; ++l) {
            int v = (u8(x, qs + 32 * j + l) >> (4 * part)) & 0xf;
            if (five) v += ((u8(x, 16 + l) >> (2 * j + part)) & 1) * 16;
            y[out++] = d * sc * v - dmin * mn;
          }
        }
      }
      break;
    }
    case Kind::Q6_K: {
      const double d = f16(x, 208);
      for (int n = 0; n < 2; ++n) {
        const int ql = 64 * n, qh = 128 + 32 * n, sc = 192 + 8 * n, base = 128 * n;
        for (int l = 0; l < 32; ++l) {
          const int is = l / 16;
          const int q1 = ((u8(x, ql + l) & 0xf) | (((u8(x, qh + l) >> 0) & 3) << 4)) - 32;
          const int q2 = ((u8(x, ql + l + 32) & 0xf) | (((u8(x, qh + l) >> 2) & 3) << 4)) - 32;
          const int q3 = ((u8(x, ql + l) >> 4) | (((u8(x, qh + l) >> 4) & 3) << 4)) - 32;
          const int q4 = ((u8(x, ql + l + 32) >> 4) | (((u8(x, qh + l) >> 6) & 3) << 4)) - 32;
          auto scale = [&](int k) {
            return static_cast<double>(static_cast<std::int8_t>(u8(x, sc + is + k)));
          };
          y[base + l] = d * scale(0) * q1;
          y[base + l + 32] = d * scale(2) * q2;
          y[base + l + 64] = d * scale(4) * q3;
          y[base + l + 96] = d * scale(6) * q4;
        }
      }
      break;
    }
    case Kind::Q8_K: {
      float d;
      std::memcpy(&d, x, 4);
      for (int j = 0; j < 256; ++j)
        y[j] = static_cast<double>(d) * static_cast<std::int8_t>(u8(x, 4 + j));
      break;
    }
    default:
      break;
  }
  return y;
}

}  // namespace kiln::quant_testing
