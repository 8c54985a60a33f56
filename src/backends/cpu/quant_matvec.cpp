// Products with quantized weights (quant_matvec.h). Q8_0 and Q4_0 walk each row of W once per 64
// rows of x, its codes widened in registers and multiplied with up to four rows of x at a time;
// the AVX-512 and AVX2 kernels are compiled for their targets here and picked at run time, so one
// binary runs on any x86-64 CPU. Other schemes decode tiles of W's rows and call gemm.
#include "backends/cpu/quant_matvec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backends/cpu/gemm.h"
#include "backends/cpu/parallel.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"
#include "kiln/quant.h"
#include "quant/blocks.h"
#include "quant/kernels.h"

namespace kiln::cpu {
namespace {

using Kind = QuantScheme::Kind;

constexpr int kBlock = 32;
// x encoded for the VNNI kernels: per block of 32, an f32 scale and 32 int8 codes.
constexpr std::int64_t kEncodedBlock = 4 + kBlock;
// Rows of x one call of a kernel multiplies with a row of W, and rows of x per pass over W: the
// rows of a pass stay in cache (64 x 4096 values encoded: 288 KiB) while W streams once.
constexpr int kGroup = 4;
constexpr std::int64_t kPass = 64;

// out[i] = dot(row, xs[i]) for i < count (1 or kGroup); xs are f32 rows, or for the VNNI
// kernels int8 blocks.
using GroupDot = void (*)(const std::byte* row, const std::byte* const* xs, std::int64_t blocks,
                          float* out);

#if defined(__x86_64__) && defined(__GNUC__)

inline std::uint16_t scale_bits(const std::byte* block) {
  std::uint16_t bits;
  std::memcpy(&bits, block, 2);
  return bits;
}

__attribute__((target("avx2"))) inline float horizontal_sum(__m256 v) {
  const __m128 sum4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 sum2 = _mm_add_ps(sum4, _mm_movehl_ps(sum4, sum4));
  return _mm_cvtss_f32(_mm_add_ss(sum2, _mm_movehdup_ps(sum2)));
}

// Q4_0's 16 bytes of nibbles as the 32 codes minus 8, int8 in value order.
__attribute__((target("avx2"))) inline void q4_codes(const std::byte* qs, __m128i& low,
                                                     __m128i& high) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i eight = _mm_set1_epi8(8);
  low = _mm_sub_epi8(_mm_and_si128(raw, mask), eight);
  high = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), mask), eight);
}

// A block's 32 codes, int8 in value order.
template <Kind kKind>
__attribute__((target("avx2"))) inline __m256i block_codes(const std::byte* block) {
  if constexpr (kKind == Kind::Q8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
  } else {
    __m128i low;
    __m128i high;
    q4_codes(block + 2, low, high);
    return _mm256_set_m128i(high, low);
  }
}

template <Kind kKind>
constexpr std::int64_t kBlockBytes = kKind == Kind::Q8_0 ? 34 : 18;

// AVX-512 with VNNI: each block's dot product with an int8 block of x is one multiply-add
// instruction (|w| times x with w's sign, summed in int32), scaled by both blocks' scales. This
// reads the weight at memory speed, where widening every code to float is compute-bound (a
// third of the copy bandwidth on a Zen 4 core).
template <Kind kKind, int kCount>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma"))) void dots_vnni(
    const std::byte* row, const std::byte* const* xs, std::int64_t blocks, float* out) {
  __m256 acc[kCount];
  for (int i = 0; i < kCount; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b, row += kBlockBytes<kKind>) {
    const __m256i w = block_codes<kKind>(row);
    const __m256i magnitude = _mm256_abs_epi8(w);
    const float dw = _cvtsh_ss(scale_bits(row));
    for (int i = 0; i < kCount; ++i) {
      const std::byte* xb = xs[i] + b * kEncodedBlock;
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 4));
      const __m256i dot =
          _mm256_dpbusd_epi32(_mm256_setzero_si256(), magnitude, _mm256_sign_epi8(x, w));
      float dx;
      std::memcpy(&dx, xb, 4);
      acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx), _mm256_cvtepi32_ps(dot), acc[i]);
    }
  }
  for (int i = 0; i < kCount; ++i) out[i] = horizontal_sum(acc[i]);
}

// AVX2: each block's codes widened to float once and scaled, then multiplied with each row of x.
template <Kind kKind, int kCount>
__attribute__((target("avx2,f16c,fma"))) void dots_avx2(const std::byte* row,
                                                        const std::byte* const* xs,
                                                        std::int64_t blocks, float* out) {
  __m256 acc[kCount];
  for (int i = 0; i < kCount; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b, row += kBlockBytes<kKind>) {
    const __m256i codes = block_codes<kKind>(row);
    const __m128i low = _mm256_castsi256_si128(codes);
    const __m128i high = _mm256_extracti128_si256(codes, 1);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(scale_bits(row)));
    auto widen = [&](__m128i part) {
      return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part)));
    };
    const __m256 w[4] = {widen(low), widen(_mm_srli_si128(low, 8)), widen(high),
                         widen(_mm_srli_si128(high, 8))};
    for (int i = 0; i < kCount; ++i) {
      const float* x = reinterpret_cast<const float*>(xs[i]) + b * kBlock;
      __m256 sum = acc[i];
      for (int k = 0; k < 4; ++k) sum = _mm256_fmadd_ps(w[k], _mm256_loadu_ps(x + 8 * k), sum);
      acc[i] = sum;
    }
  }
  for (int i = 0; i < kCount; ++i) out[i] = horizontal_sum(acc[i]);
}

#endif

// The kernels for one scheme and instruction set: kGroup rows of x at a time, and one.
struct Kernels {
  GroupDot group;
  GroupDot one;
  bool encoded;  // x as int8 blocks (the VNNI kernels)
};

template <Kind kKind>
Kernels kernels_for([[maybe_unused]] QuantIsa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == QuantIsa::Avx512) {
    return {dots_vnni<kKind, kGroup>, dots_vnni<kKind, 1>, true};
  }
  return {dots_avx2<kKind, kGroup>, dots_avx2<kKind, 1>, false};
#else
  return {nullptr, nullptr, false};
#endif
}

bool all_finite(const float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return false;
  }
  return true;
}

// Q8_0 and Q4_0 on the blocks (isa Avx2 or Avx512).
void product_on_blocks(const QuantMatrix& w, const float* x, std::int64_t batch, float* out,
                       QuantIsa isa) {
  const std::int64_t blocks = w.cols / kBlock;
  const std::int64_t row_bytes = blocks * (w.scheme.kind == Kind::Q8_0 ? 34 : 18);
  const Kernels k =
      w.scheme.kind == Kind::Q8_0 ? kernels_for<Kind::Q8_0>(isa) : kernels_for<Kind::Q4_0>(isa);
  // The rows of x as the kernels read them (`lanes`, each with the row of out it fills); with
  // VNNI, rows that are not all finite have no int8 code and go through the AVX2 kernel instead.
  std::vector<const std::byte*> lanes;
  std::vector<std::int64_t> lane_row, float_rows;
  std::vector<std::byte> encoded;
  lanes.reserve(static_cast<std::size_t>(batch));
  lane_row.reserve(static_cast<std::size_t>(batch));
  if (k.encoded) {
    encoded.resize(static_cast<std::size_t>(batch * blocks * kEncodedBlock));
    std::vector<char> finite(static_cast<std::size_t>(batch));
    parallel_for(batch,
                 std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(w.cols, 1)),
                 [&](std::int64_t begin, std::int64_t end) {
                   for (std::int64_t m = begin; m < end; ++m) {
                     const float* row = x + m * w.cols;
                     finite[static_cast<std::size_t>(m)] = all_finite(row, w.cols);
                     if (finite[static_cast<std::size_t>(m)]) {
                       quant::quantize_int8(row, blocks, kBlock,
                                            encoded.data() + m * blocks * kEncodedBlock);
                     }
                   }
                 });
    for (std::int64_t m = 0; m < batch; ++m) {
      if (!finite[static_cast<std::size_t>(m)]) {
        float_rows.push_back(m);
        continue;
      }
      lanes.push_back(encoded.data() + m * blocks * kEncodedBlock);
      lane_row.push_back(m);
    }
  } else {
    for (std::int64_t m = 0; m < batch; ++m) {
      lanes.push_back(reinterpret_cast<const std::byte*>(x + m * w.cols));
      lane_row.push_back(m);
    }
  }
  const Kernels plain = w.scheme.kind == Kind::Q8_0 ? kernels_for<Kind::Q8_0>(QuantIsa::Avx2)
                                                    : kernels_for<Kind::Q4_0>(QuantIsa::Avx2);
  const auto count = static_cast<std::int64_t>(lanes.size());
  const std::int64_t work =
      w.cols * std::min<std::int64_t>(std::max<std::int64_t>(batch, 1), kPass);
  parallel_for(w.rows, std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(work, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 float dots[kGroup];
                 for (std::int64_t pass = 0; pass < count; pass += kPass) {
                   const std::int64_t last = std::min(count, pass + kPass);
                   for (std::int64_t r = begin; r < end; ++r) {
                     const std::byte* row = w.blocks + r * row_bytes;
                     std::int64_t i = pass;
                     for (; i + kGroup <= last; i += kGroup) {
                       k.group(row, lanes.data() + i, blocks, dots);
                       for (int j = 0; j < kGroup; ++j) out[lane_row[i + j] * w.rows + r] = dots[j];
                     }
                     for (; i < last; ++i) {
                       k.one(row, lanes.data() + i, blocks, &out[lane_row[i] * w.rows + r]);
                     }
                   }
                 }
                 for (std::int64_t m : float_rows) {
                   const auto* xm = reinterpret_cast<const std::byte*>(x + m * w.cols);
                   for (std::int64_t r = begin; r < end; ++r) {
                     plain.one(w.blocks + r * row_bytes, &xm, blocks, &out[m * w.rows + r]);
                   }
                 }
               });
}

// Any scheme: tiles of W's rows decoded to f32 (about 64 KiB each, in cache) and multiplied
// with x by gemm, tiles spread over the threads.
void product_on_decoded_tiles(const QuantMatrix& w, const float* x, std::int64_t batch,
                              float* out) {
  const quant::BlockSize block = quant::block_size(w.scheme, w.cols);
  const std::int64_t row_bytes = w.cols / block.values * block.bytes;
  const std::int64_t tile = std::clamp<std::int64_t>(16384 / w.cols, 1, w.rows);
  const std::int64_t tiles = (w.rows + tile - 1) / tile;
  parallel_for(tiles, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> decoded(static_cast<std::size_t>(tile * w.cols));
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t first = t * tile;
      const std::int64_t n = std::min(tile, w.rows - first);
      quant::dequantize_blocks(w.scheme.kind, block, w.blocks + first * row_bytes,
                               n * w.cols / block.values, decoded.data());
      gemm<float>({x, batch, w.cols, w.cols, 1}, {decoded.data(), w.cols, n, 1, w.cols},
                  {out + first, batch, n, w.rows, 1}, 1.0f, 0.0f);
    }
  });
}

}  // namespace

bool cpu_has(QuantIsa isa) noexcept {
#if defined(__x86_64__) && defined(__GNUC__)
  switch (isa) {
    case QuantIsa::Scalar:
      return true;
    case QuantIsa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case QuantIsa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
             cpu_has(QuantIsa::Avx2);
  }
  return false;
#else
  return isa == QuantIsa::Scalar;
#endif
}

QuantIsa best_quant_isa() noexcept {
  static const QuantIsa best = cpu_has(QuantIsa::Avx512) ? QuantIsa::Avx512
                               : cpu_has(QuantIsa::Avx2) ? QuantIsa::Avx2
                                                         : QuantIsa::Scalar;
  return best;
}

void quantized_matmul(const QuantMatrix& w, const float* x, std::int64_t batch, float* out,
                      QuantIsa isa) {
  if (w.rows == 0 || batch == 0) return;
  if (w.cols == 0) {
    std::fill(out, out + batch * w.rows, 0.0f);
    return;
  }
  const bool on_blocks = w.scheme.kind == Kind::Q8_0 || w.scheme.kind == Kind::Q4_0;
  if (on_blocks && isa != QuantIsa::Scalar) return product_on_blocks(w, x, batch, out, isa);
  product_on_decoded_tiles(w, x, batch, out);
}

void quantized_matvec(const TensorData& weight, std::span<const float> x, std::span<float> y,
                      QuantIsa isa) {
  constexpr std::string_view kOp = "quantized_matvec";
  if (weight.dtype() != DType::QFloat) {
    detail::fail<DTypeMismatch>(kOp, "needs a qfloat weight, got ", dtype_name(weight.dtype()));
  }
  const Shape& shape = weight.shape();
  if (shape.rank() != 2 || static_cast<std::int64_t>(x.size()) != shape[1] ||
      static_cast<std::int64_t>(y.size()) != shape[0]) {
    detail::fail<ShapeMismatch>(kOp, "weight ", shape.to_string(), " times ", x.size(),
                                " values into ", y.size());
  }
  if (!cpu_has(isa)) {
    detail::fail<InvalidArgument>(kOp, "this CPU cannot run instruction set ",
                                  static_cast<int>(isa));
  }
  for (std::size_t k = 0; k < x.size(); ++k) {
    if (!std::isfinite(x[k])) {
      detail::fail<InvalidArgument>(kOp, "x[", k, "] is ", x[k], ": the values must be finite");
    }
  }
  quantized_matmul({weight.scheme(), weight.bytes().data(), shape[0], shape[1]}, x.data(), 1,
                   y.data(), isa);
}

}  // namespace kiln::cpu
