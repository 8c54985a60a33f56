// The quantized kernels' block readings (src/backends/cuda/quant_blocks.h, the text NVRTC
// compiles into them) checked on the host, without a GPU: decode8 against src/quant's decoder bit
// for bit for every kind; the product's codes and scales against decode8's values; the 16-bit
// packing of codes and the three-part split of f32 exhaustively or over edge cases; a warp of
// kiln_quant_product emulated lane by lane through an emulation of PTX's m16n8k16 fragments
// against a float64 product; the plans; and every quantized kernel compiled by NVRTC for sm_90.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/quant.h"
#include "backends/cuda/quant_blocks.h"
#include "gpu/nvrtc_compile.h"
#include "quant/block_reference.h"

namespace gpu_quant_host {

using kiln::DType;
using kiln::QuantScheme;
using kiln::Shape;
using kiln::TensorData;
using QKind = QuantScheme::Kind;
namespace qb = kiln::cuda::quant_blocks;

// f(kind) once per GGUF kind with its reader as the template argument.
template <class F>
void for_each_gguf_kind(F&& f) {
  f.template operator()<qb::KqQ4_0>(QKind::Q4_0);
  f.template operator()<qb::KqQ4_1>(QKind::Q4_1);
  f.template operator()<qb::KqQ5_0>(QKind::Q5_0);
  f.template operator()<qb::KqQ5_1>(QKind::Q5_1);
  f.template operator()<qb::KqQ8_0>(QKind::Q8_0);
  f.template operator()<qb::KqQ2_K>(QKind::Q2_K);
  f.template operator()<qb::KqQ3_K>(QKind::Q3_K);
  f.template operator()<qb::KqQ4_K>(QKind::Q4_K);
  f.template operator()<qb::KqQ5_K>(QKind::Q5_K);
  f.template operator()<qb::KqQ6_K>(QKind::Q6_K);
  f.template operator()<qb::KqQ8_K>(QKind::Q8_K);
}

std::string name_of(QKind kind) { return std::string(kiln::quant_kind_name(kind)); }

// Random blocks of kind, then blocks whose f16 scales are the edge cases: zero, -0, the smallest
// subnormal, the largest finite, infinity.
std::vector<std::byte> test_blocks(QKind kind, int random, std::mt19937& rng) {
  std::vector<std::byte> bytes = kiln::quant_testing::random_blocks(kind, random, rng);
  const auto layout = kiln::quant_testing::layout(kind);
  for (std::uint16_t bits : {0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0xFC00}) {
    std::vector<std::byte> block = kiln::quant_testing::random_blocks(kind, 1, rng);
    for (int at : kiln::quant_testing::f16_fields(kind)) std::memcpy(block.data() + at, &bits, 2);
    bytes.insert(bytes.end(), block.begin(), block.begin() + layout.bytes);
  }
  return bytes;
}

// The host decoder's values of blocks (TensorData::dequantize: src/quant).
std::vector<float> host_values(QKind kind, const std::vector<std::byte>& bytes) {
  const auto layout = kiln::quant_testing::layout(kind);
  const auto blocks = static_cast<std::int64_t>(bytes.size()) / layout.bytes;
  const TensorData q =
      TensorData::quantized(bytes, Shape{blocks, layout.values}, kiln::quant_scheme(kind));
  const TensorData f = q.dequantize();
  const auto span = f.as_span<float>();
  return {span.begin(), span.end()};
}

// Equal bits, or both NaN (a GPU's NaN is its canonical one, not the host's).
::testing::AssertionResult same_value(float got, float want) {
  if ((std::isnan(got) && std::isnan(want)) ||
      std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << got << " (0x" << std::hex << std::bit_cast<std::uint32_t>(got) << ") vs " << want
         << " (0x" << std::bit_cast<std::uint32_t>(want) << ")";
}

const auto* as_bytes(const std::vector<std::byte>& v) {
  return reinterpret_cast<const unsigned char*>(v.data());
}

TEST(GpuQuantHost, DecodeIsTheHostDecoderBitForBit) {
  std::mt19937 rng(2001);
  for_each_gguf_kind([&]<class K>(QKind kind) {
    const std::vector<std::byte> bytes = test_blocks(kind, 24, rng);
    const std::vector<float> want = host_values(kind, bytes);
    const auto blocks = static_cast<int>(bytes.size()) / K::kBytes;
    ASSERT_EQ(kiln::quant_testing::layout(kind).bytes, K::kBytes) << name_of(kind);
    ASSERT_EQ(kiln::quant_testing::layout(kind).values, K::kValues) << name_of(kind);
    int failures = 0;
    for (int b = 0; b < blocks; ++b) {
      for (int j = 0; j < K::kValues / 8; ++j) {
        float got[8];
        K::decode8(as_bytes(bytes) + b * K::kBytes, j, got);
        for (int e = 0; e < 8; ++e) {
          const auto i = static_cast<std::size_t>(b * K::kValues + 8 * j + e);
          if (failures < 5 && !same_value(got[e], want[i])) {
            ++failures;
            ADD_FAILURE() << name_of(kind) << " block " << b << " value " << 8 * j + e << ": "
                          << same_value(got[e], want[i]).message();
          }
        }
      }
    }
  });
}

TEST(GpuQuantHost, Int8DecodeIsTheHostDecoderBitForBit) {
  std::mt19937 rng(2002);
  for (std::int64_t block : {16, 32, 48, 256}) {
    std::vector<float> values(static_cast<std::size_t>(4 * block));
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (float& v : values) v = normal(rng);
    values[3] = 0.0f;
    const TensorData q =
        TensorData::from_vec(values, Shape{4, block}).quantize(kiln::int8_block_scheme(block));
    const TensorData decoded = q.dequantize();
    const auto want = decoded.as_span<float>();
    const auto* bytes = reinterpret_cast<const unsigned char*>(q.bytes().data());
    for (std::int64_t i = 0; i < 4 * block; ++i) {
      const float got = qb::KqInt8::decode(bytes + (i / block) * (block + 4), i % block);
      ASSERT_TRUE(same_value(got, want[static_cast<std::size_t>(i)]))
          << "block " << block << " at " << i;
    }
  }
}

// The value step s, chunk h, lane quad position t, byte e of the product's reading gives.
template <class K>
float product_value(const unsigned char* block, int s, int h, int t, int e) {
  const unsigned u = (K::codes(block, s, h, t) >> (8 * e)) & 0xFF;
  float mul, add;
  K::scale(block, s, mul, add);
  const float code = static_cast<float>(static_cast<int>(u) - K::kBias);
  return K::kHasMin ? qb::kq_add(qb::kq_mul(mul, code), add) : qb::kq_mul(mul, code);
}

TEST(GpuQuantHost, ProductCodesAndScalesGiveTheDecodersValues) {
  std::mt19937 rng(2003);
  for_each_gguf_kind([&]<class K>(QKind kind) {
    const std::vector<std::byte> bytes = test_blocks(kind, 16, rng);
    const auto blocks = static_cast<int>(bytes.size()) / K::kBytes;
    int failures = 0;
    for (int b = 0; b < blocks; ++b) {
      const unsigned char* block = as_bytes(bytes) + b * K::kBytes;
      float want[K::kValues];
      for (int j = 0; j < K::kValues / 8; ++j) K::decode8(block, j, want + 8 * j);
      for (int s = 0; s < K::kValues / K::kStep; ++s) {
        for (int h = 0; h < K::kStep / 16; ++h) {
          for (int t = 0; t < 4; ++t) {
            for (int e = 0; e < 4; ++e) {
              const int i = s * K::kStep + 16 * h + 4 * t + e;
              const unsigned u = (K::codes(block, s, h, t) >> (8 * e)) & 0xFF;
              if (!K::kWide) {
                ASSERT_LT(u, 128u) << name_of(kind);
              }
              const float got = product_value<K>(block, s, h, t, e);
              if (failures < 5 && !same_value(got, want[i])) {
                ++failures;
                ADD_FAILURE() << name_of(kind) << " block " << b << " value " << i << ": "
                              << same_value(got, want[i]).message();
              }
            }
          }
        }
      }
    }
  });
}

TEST(GpuQuantHost, Int8CodesAreTheSignedBytes) {
  std::vector<unsigned char> codes(16);
  for (int i = 0; i < 16; ++i)
    codes[static_cast<std::size_t>(i)] = static_cast<unsigned char>(i * 17 + 3);
  for (int t = 0; t < 4; ++t) {
    const unsigned u4 = qb::KqInt8::codes(codes.data(), t);
    for (int e = 0; e < 4; ++e) {
      const int q = static_cast<signed char>(codes[static_cast<std::size_t>(4 * t + e)]);
      EXPECT_EQ(static_cast<int>((u4 >> (8 * e)) & 0xFF) - qb::KqInt8::kBias, q);
    }
  }
}

// The 16-bit float halves of a packed pair as floats.
float half_value(unsigned pair, int which, bool bf16) {
  return qb::kq_elem_to_float((pair >> (16 * which)) & 0xFFFF, bf16);
}

template <bool kBf16, bool kWide, int kBias>
void expect_exact_packing() {
  const unsigned limit = kWide ? 256 : 128;
  for (unsigned u = 0; u < limit; ++u) {
    // The code in each of the four bytes, with different neighbours.
    const unsigned u4 =
        u | (((u + 1) % limit) << 8) | (((u + 7) % limit) << 16) | (((u + 64) % limit) << 24);
    unsigned lo = 0, hi = 0;
    qb::kq_pack<kBf16, kWide, kBias>(u4, lo, hi);
    const float want[4] = {static_cast<float>(static_cast<int>(u) - kBias),
                           static_cast<float>(static_cast<int>((u + 1) % limit) - kBias),
                           static_cast<float>(static_cast<int>((u + 7) % limit) - kBias),
                           static_cast<float>(static_cast<int>((u + 64) % limit) - kBias)};
    const float got[4] = {half_value(lo, 0, kBf16), half_value(lo, 1, kBf16),
                          half_value(hi, 0, kBf16), half_value(hi, 1, kBf16)};
    for (int e = 0; e < 4; ++e) {
      ASSERT_EQ(got[e], want[e]) << (kBf16 ? "bf16" : "f16") << " wide " << kWide << " bias "
                                 << kBias << " code " << u << " byte " << e;
    }
  }
}

TEST(GpuQuantHost, CodesPackIntoExactSixteenBitFloats) {
  // Every bias a kind uses, narrow codes (below 128) and wide ones (Q8_0, Q8_K, int8).
  expect_exact_packing<true, false, 0>();
  expect_exact_packing<true, false, 4>();
  expect_exact_packing<true, false, 8>();
  expect_exact_packing<true, false, 16>();
  expect_exact_packing<true, false, 32>();
  expect_exact_packing<false, false, 0>();
  expect_exact_packing<false, false, 8>();
  expect_exact_packing<false, false, 32>();
  expect_exact_packing<true, true, 128>();
  expect_exact_packing<false, true, 128>();
}

TEST(GpuQuantHost, F32SplitsIntoThreeExactBf16Parts) {
  std::mt19937 rng(2004);
  std::vector<float> values = {0.0f,           -0.0f,           1.0f,        -1.0f,
                               3.14159265f,    1e-40f,          -1e-45f,     3.4028235e38f,
                               -3.4028235e38f, 1.17549435e-38f, 16777215.0f, 0.1f};
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 20000; ++i) {
    const float v = std::bit_cast<float>(bits(rng));
    if (std::isfinite(v)) values.push_back(v);
  }
  for (float v : values) {
    unsigned short parts[3];
    qb::kq_split3(v, parts);
    double sum = 0;
    for (unsigned short p : parts) sum += static_cast<double>(qb::kq_elem_to_float(p, true));
    // Exact while the parts stay normal floats; below, the leftovers of a subnormal flush.
    if (std::fabs(v) >= 0x1p-100f) {
      ASSERT_EQ(sum, static_cast<double>(v)) << v;
    } else {
      ASSERT_LE(std::fabs(sum - static_cast<double>(v)), 0x1p-132) << v;
    }
    ASSERT_EQ(std::signbit(qb::kq_elem_to_float(parts[0], true)), std::signbit(v)) << v;
  }
  for (float v : {INFINITY, -INFINITY, NAN, std::bit_cast<float>(0x7F800001u)}) {
    unsigned short parts[3];
    qb::kq_split3(v, parts);
    const float hi = qb::kq_elem_to_float(parts[0], true);
    EXPECT_TRUE(std::isnan(v) ? std::isnan(hi) : hi == v) << v;
    EXPECT_EQ(parts[1], 0);
    EXPECT_EQ(parts[2], 0);
  }
}

// ---- one warp of kiln_quant_product, emulated ----

// PTX's mma.m16n8k16.row.col with f32 accumulators, from the fragments of all 32 lanes: lane
// 4g + t holds A (16 x 16, row-major) elements (g, 2t..2t+1) in a[0], (g + 8, 2t..) in a[1],
// (g, 2t + 8..) in a[2], (g + 8, 2t + 8..) in a[3]; B (16 x 8) elements (2t..2t+1, g) in b[0] and
// (2t + 8.., g) in b[1]; C (16 x 8) elements (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).
void emulate_mma(float (*c)[4], unsigned (*a)[4], unsigned (*b)[2], bool bf16) {
  double A[16][16], B[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int half = 0; half < 2; ++half) {
      A[g][2 * t + half] = half_value(a[lane][0], half, bf16);
      A[g + 8][2 * t + half] = half_value(a[lane][1], half, bf16);
      A[g][2 * t + 8 + half] = half_value(a[lane][2], half, bf16);
      A[g + 8][2 * t + 8 + half] = half_value(a[lane][3], half, bf16);
      B[2 * t + half][g] = half_value(b[lane][0], half, bf16);
      B[2 * t + 8 + half][g] = half_value(b[lane][1], half, bf16);
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int i = 0; i < 4; ++i) {
      double sum = c[lane][i];
      for (int k = 0; k < 16; ++k) sum += A[rows[i]][k] * B[k][cols[i]];
      c[lane][i] = static_cast<float>(sum);
    }
  }
}

// A warp's 16 weight rows of k values in kind K times `columns` rows of x (16-bit values, terms
// parts each: row-major [terms][columns][k]), as kiln_quant_product's kq_tile walks them (its
// steps, chunks, fragments and kq_apply), with columns past `valid` reading zeros. The result is
// [16][columns] from the C fragments.
template <class K, bool kBf16>
std::vector<double> emulate_warp(const std::vector<std::byte>& weight, std::int64_t k,
                                 const std::vector<unsigned short>& x, int terms, int columns,
                                 int valid) {
  const std::int64_t row_bytes = k / K::kValues * K::kBytes;
  const int tiles = columns / 8;
  std::vector<std::array<std::array<float, 4>, 4>> acc(32);
  for (auto& lane : acc) {
    for (auto& nt : lane) nt.fill(0.0f);
  }
  const unsigned one = kBf16 ? 0x3F803F80u : 0x3C003C00u;
  for (std::int64_t v = 0; v < k; v += K::kStep) {
    const int step = static_cast<int>((v % K::kValues) / K::kStep);
    unsigned a[K::kStep / 16][32][4];
    float mul[32][2], add[32][2];
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, t = lane % 4;
      const auto* ba = as_bytes(weight) + g * row_bytes + v / K::kValues * K::kBytes;
      const auto* bb = as_bytes(weight) + (g + 8) * row_bytes + v / K::kValues * K::kBytes;
      K::scale(ba, step, mul[lane][0], add[lane][0]);
      K::scale(bb, step, mul[lane][1], add[lane][1]);
      for (int h = 0; h < K::kStep / 16; ++h)
        qb::kq_a_fragment<K, kBf16>(ba, bb, step, h, t, a[h][lane]);
    }
    for (int nt = 0; nt < tiles; ++nt) {
      float codes[32][4] = {}, xsum[32][4] = {};
      for (int h = 0; h < K::kStep / 16; ++h) {
        for (int term = 0; term < terms; ++term) {
          unsigned b[32][2];
          unsigned ones[32][4];
          for (int lane = 0; lane < 32; ++lane) {
            const int g = lane / 4, t = lane % 4, col = nt * 8 + g;
            const std::int64_t at = (term * columns + col) * k + v + 16 * h + 4 * t;
            b[lane][0] = b[lane][1] = 0;
            if (col < valid) {
              const auto i = static_cast<std::size_t>(at);
              b[lane][0] = x[i] | (static_cast<unsigned>(x[i + 1]) << 16);
              b[lane][1] = x[i + 2] | (static_cast<unsigned>(x[i + 3]) << 16);
            }
            for (unsigned& o : ones[lane]) o = one;
          }
          emulate_mma(codes, a[h], b, kBf16);
          if (K::kHasMin) emulate_mma(xsum, ones, b, kBf16);
        }
      }
      for (int lane = 0; lane < 32; ++lane) {
        qb::kq_apply<K::kHasMin>(
            acc[static_cast<std::size_t>(lane)][static_cast<std::size_t>(nt)].data(), codes[lane],
            xsum[lane], mul[lane][0], add[lane][0], mul[lane][1], add[lane][1]);
      }
    }
  }
  std::vector<double> out(static_cast<std::size_t>(16 * columns));
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int nt = 0; nt < tiles; ++nt) {
      const auto& c = acc[static_cast<std::size_t>(lane)][static_cast<std::size_t>(nt)];
      const int col = nt * 8 + 2 * t;
      out[static_cast<std::size_t>(g * columns + col)] = c[0];
      out[static_cast<std::size_t>(g * columns + col + 1)] = c[1];
      out[static_cast<std::size_t>((g + 8) * columns + col)] = c[2];
      out[static_cast<std::size_t>((g + 8) * columns + col + 1)] = c[3];
    }
  }
  return out;
}

TEST(GpuQuantHost, EmulatedWarpMultipliesTheDecodedWeight) {
  std::mt19937 rng(2005);
  for_each_gguf_kind([&]<class K>(QKind kind) {
    const std::int64_t k = 512;
    const int columns = 16, valid = 11;
    std::vector<std::byte> weight =
        kiln::quant_testing::random_blocks(kind, static_cast<int>(16 * k / K::kValues), rng);
    // Modest scales, so the sums stay far from f32's range.
    for (std::size_t b = 0; b < weight.size() / K::kBytes; ++b) {
      for (int at : kiln::quant_testing::f16_fields(kind)) {
        const auto bits =
            static_cast<std::uint16_t>(0x2000 + (rng() & 0x0FFF) + ((rng() & 1) << 15));
        std::memcpy(weight.data() + b * K::kBytes + at, &bits, 2);
      }
      if (kind == QKind::Q8_K) {
        const float d = std::uniform_real_distribution<float>(-0.01f, 0.01f)(rng);
        std::memcpy(weight.data() + b * K::kBytes, &d, 4);
      }
    }
    const std::vector<float> w = host_values(kind, weight);
    for (int variant = 0; variant < 3; ++variant) {  // bf16, f16, f32 as three bf16 parts
      const bool bf16 = variant != 1;
      const int terms = variant == 2 ? 3 : 1;
      std::vector<float> xs(static_cast<std::size_t>(columns * k));
      std::normal_distribution<float> normal;
      for (float& v : xs) v = normal(rng);
      std::vector<unsigned short> x(static_cast<std::size_t>(terms * columns * k));
      for (std::size_t i = 0; i < xs.size(); ++i) {
        if (terms == 3) {
          unsigned short parts[3];
          qb::kq_split3(xs[i], parts);
          for (int p = 0; p < 3; ++p) x[p * xs.size() + i] = parts[p];
        } else {
          x[i] = static_cast<unsigned short>(qb::kq_float_to_elem(xs[i], bf16));
          xs[i] = qb::kq_elem_to_float(x[i], bf16);  // the value the product sees
        }
      }
      const std::vector<double> got =
          bf16 ? emulate_warp<K, true>(weight, k, x, terms, columns, valid)
               : emulate_warp<K, false>(weight, k, x, terms, columns, valid);
      for (int r = 0; r < 16; ++r) {
        for (int c = 0; c < columns; ++c) {
          double want = 0, magnitude = 0;
          if (c < valid) {
            for (std::int64_t j = 0; j < k; ++j) {
              const double p = static_cast<double>(w[static_cast<std::size_t>(r * k + j)]) *
                               xs[static_cast<std::size_t>(c * k + j)];
              want += p;
              magnitude += std::fabs(p);
            }
          }
          ASSERT_NEAR(got[static_cast<std::size_t>(r * columns + c)], want,
                      1e-5 * magnitude + 1e-30)
              << name_of(kind) << " variant " << variant << " row " << r << " column " << c;
        }
      }
    }
  });
}

// ---- plans and NVRTC ----

QuantScheme scheme_of(QKind kind) {
  if (kind == QKind::Int8Channel) return kiln::int8_channel_scheme();
  if (kind == QKind::Int8Block) return kiln::int8_block_scheme(32);
  return kiln::quant_scheme(kind);
}

const QKind kAllKinds[] = {QKind::Q4_0,       QKind::Q4_1, QKind::Q5_0, QKind::Q5_1,
                           QKind::Q8_0,       QKind::Q2_K, QKind::Q3_K, QKind::Q4_K,
                           QKind::Q5_K,       QKind::Q6_K, QKind::Q8_K, QKind::Int8Block,
                           QKind::Int8Channel};

TEST(GpuQuantHost, ProductPlansTakeEveryKindAndFitSharedMemory) {
  for (QKind kind : kAllKinds) {
    for (DType x : {DType::BF16, DType::F16, DType::F32}) {
      for (std::int64_t rows : {1, 8, 9, 32, 256}) {
        const auto plan = kiln::cuda::plan_quant_product(scheme_of(kind), 4096, x, rows);
        ASSERT_TRUE(plan.applies) << name_of(kind);
        // The matrix-vector kernel takes up to 100 KiB (two blocks an SM), the tiled one 80 (x's
        // tile staged beside W's: two stages of 64 rows of Q8_K and 32 rows of bf16 x).
        EXPECT_LE(plan.shared_bytes(), (plan.matvec ? 100u : 80u) * 1024) << name_of(kind);
        if (plan.matvec) {
          EXPECT_EQ(plan.pieces * plan.matvec_rows, 4) << name_of(kind);
          EXPECT_GE(plan.stages, 2) << name_of(kind);
          EXPECT_GE(plan.stage_bytes, plan.pieces * 4 * plan.tile_bytes + 15 + 8) << name_of(kind);
        }
        EXPECT_EQ(plan.row_stride % 16, 0) << name_of(kind);
        EXPECT_GE(plan.row_stride, plan.tile_bytes + 15 + 8) << name_of(kind);
        EXPECT_EQ(plan.bf16, x != DType::F16);
        // Up to 64 rows of x, an f32 x is rounded to int8 for every GGUF kind, a 16-bit one for
        // Q8_0, Q8_K, Q4_K and Q5_K; the rest multiply x in bf16/f16 (f32 in three parts).
        const bool gguf = kind != QKind::Int8Block && kind != QKind::Int8Channel;
        const bool int_kind = kind == QKind::Q8_0 || kind == QKind::Q8_K || kind == QKind::Q4_K ||
                              kind == QKind::Q5_K;
        const bool int8_x = gguf && rows <= 64 && (x == DType::F32 || int_kind);
        EXPECT_EQ(plan.terms, int8_x ? 0 : (x == DType::F32 ? 3 : 1)) << name_of(kind) << rows;
        EXPECT_EQ(kiln::cuda::quant_rounds_x(kind, x, rows), gguf && (rows <= 4 || int8_x));
        EXPECT_EQ(plan.column_tiles, rows <= 8 ? 1 : (rows <= 16 ? 2 : 4)) << rows;
      }
    }
  }
  using kiln::cuda::plan_quant_product;
  // int8 blocks: whole ones in a tile (dividing 256), or tiles inside one (multiples of 256).
  EXPECT_EQ(plan_quant_product(kiln::int8_block_scheme(64), 512, DType::BF16, 1).int8_form, 1);
  EXPECT_EQ(plan_quant_product(kiln::int8_block_scheme(512), 1024, DType::BF16, 1).int8_form, 2);
  EXPECT_EQ(plan_quant_product(kiln::int8_channel_scheme(), 4000, DType::BF16, 1).int8_form, 2);
  EXPECT_FALSE(plan_quant_product(kiln::int8_block_scheme(48), 480, DType::BF16, 1).applies);
  EXPECT_FALSE(plan_quant_product(kiln::int8_block_scheme(8), 512, DType::BF16, 1).applies);
  EXPECT_FALSE(plan_quant_product(kiln::int8_channel_scheme(), 4001, DType::BF16, 1).applies);
  EXPECT_FALSE(plan_quant_product(kiln::quant_scheme(QKind::Q4_K), 0, DType::BF16, 1).applies);
}

bool every_instance() { return kiln::test::every_codegen_instance(); }

TEST(GpuCodegen, QuantKernelsCompile) {
  // Every kind's decode and products once (bf16 x: the matrix-vector kernel, the tiled one of two
  // column tiles and of four); with KILN_CODEGEN=all every product variant (x f16, f32 in three
  // parts or rounded to int8, 1 / 2 / 4 column tiles) and the indexed decodes.
  for (QKind kind : kAllKinds) {
    const std::string name = name_of(kind);
    EXPECT_EQ(kiln::test::nvrtc_errors(kiln::cuda::quant_decode_source(kind, false)), "") << name;
    if (every_instance()) {
      EXPECT_EQ(kiln::test::nvrtc_errors(kiln::cuda::quant_decode_source(kind, true)), "") << name;
    }
    for (DType x : {DType::BF16, DType::F16, DType::F32}) {
      for (std::int64_t rows : {1, 16, 32, 128}) {
        // Rows 1 take the matrix-vector kernel, 16 the tiled one (on int8 x for an f32 x or the
        // kinds of quant_int_path), 128 the tiled one on x as it is.
        // (And an f32 x at 16 rows: every kind's integer path.)
        const bool f32_int8 = x == DType::F32 && rows == 16;
        if (!every_instance() && !f32_int8 && (x != DType::BF16 || rows == 32)) continue;
        const auto plan = kiln::cuda::plan_quant_product(scheme_of(kind), 4096, x, rows);
        const std::string source = kiln::cuda::quant_product_source(plan);
        EXPECT_NE(source.find(plan.matvec ? "kiln_quant_matvec(const KqProductParams p)"
                                          : "kiln_quant_product(const KqProductParams p)"),
                  std::string::npos);
        EXPECT_EQ(kiln::test::nvrtc_errors(source), "") << plan.key();
      }
    }
  }
  // The int8 forms beside int8_block(32)'s: a tile inside a block.
  EXPECT_EQ(kiln::test::nvrtc_errors(kiln::cuda::quant_product_source(
                kiln::cuda::plan_quant_product(kiln::int8_channel_scheme(), 4096, DType::BF16, 1))),
            "");
  EXPECT_EQ(kiln::test::nvrtc_errors(kiln::cuda::quant_decode_source(QKind::Q4_K, true)), "");
  // The outputs beside bf16's without a bias: f64 (an f64 x's) with an f32 bias, f16 with f16's.
  for (const auto& [out, bias] : {std::pair{DType::F64, DType::F32}, {DType::F16, DType::F16}}) {
    auto plan = kiln::cuda::plan_quant_product(scheme_of(QKind::Q4_0), 4096,
                                               out == DType::F16 ? out : DType::F32, 1);
    plan.out = out;
    plan.bias = bias;
    EXPECT_EQ(kiln::test::nvrtc_errors(kiln::cuda::quant_product_source(plan)), "") << plan.key();
  }
  EXPECT_EQ(kiln::test::nvrtc_errors(kiln::cuda::quant_split_source()), "");
  for (int x_type : {0, 1, 2}) {
    EXPECT_EQ(kiln::test::nvrtc_errors(kiln::cuda::quant_round_source(x_type)), "") << x_type;
  }
}

}  // namespace gpu_quant_host
