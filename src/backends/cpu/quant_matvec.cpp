// Quantized matrix-vector products. Each row's dot product walks its blocks once: the codes are
// widened to float in registers, multiplied with x and scaled by the block's f16 scale. AVX-512
// and AVX2 kernels are compiled for their targets here and picked at run time, so one binary
// runs on any x86-64 CPU.
#include "backends/cpu/quant_matvec.h"

#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backends/cpu/parallel.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"
#include "kiln/quant.h"
#include "quant/blocks.h"
#include "quant/kernels.h"

namespace kiln::cpu {
namespace {

using Kind = QuantScheme::Kind;
// x is the float values, or for the VNNI kernels their int8 blocks.
using RowDot = float (*)(const std::byte* row, const std::byte* x, std::int64_t blocks);

constexpr int kBlock = 32;

// Any CPU: each block decoded by the reference decoder, then a float dot product.
template <Kind kKind>
float dot_scalar(const std::byte* row, const std::byte* x_bytes, std::int64_t blocks) {
  const auto* x = reinterpret_cast<const float*>(x_bytes);
  const quant::BlockSize size = quant::block_size(QuantScheme{kKind, kBlock}, 0);
  float sum = 0.0f;
  float values[kBlock];
  for (std::int64_t b = 0; b < blocks; ++b, row += size.bytes, x += kBlock) {
    quant::dequantize_blocks(kKind, size, row, 1, values);
    for (int j = 0; j < kBlock; ++j) sum += values[j] * x[j];
  }
  return sum;
}

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

// AVX-512 with VNNI: x is first encoded as int8 blocks of 32 with an f32 scale each (kiln's
// int8 blocks, as llama.cpp encodes activations), so each block's dot product is one int8
// multiply-add instruction: |w| times x with w's sign, summed in int32, then scaled by both
// blocks' scales. This reads the weight at memory speed, where widening every code to float
// is compute-bound (a third of the copy bandwidth on a Zen 4 core).
template <Kind kKind>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma"))) float dot_vnni(
    const std::byte* row, const std::byte* xq, std::int64_t blocks) {
  constexpr std::int64_t kBytes = kKind == Kind::Q8_0 ? 34 : 18;
  __m256 acc = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b, row += kBytes, xq += 4 + kBlock) {
    __m256i w;
    if constexpr (kKind == Kind::Q8_0) {
      w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2));
    } else {
      __m128i low;
      __m128i high;
      q4_codes(row + 2, low, high);
      w = _mm256_set_m128i(high, low);
    }
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 4));
    const __m256i dot =
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
    float dx;
    std::memcpy(&dx, xq, 4);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(scale_bits(row)) * dx), _mm256_cvtepi32_ps(dot),
                          acc);
  }
  return horizontal_sum(acc);
}

template <Kind kKind>
__attribute__((target("avx2,f16c,fma"))) float dot_avx2(const std::byte* row,
                                                        const std::byte* x_bytes,
                                                        std::int64_t blocks) {
  const auto* x = reinterpret_cast<const float*>(x_bytes);
  constexpr std::int64_t kBytes = kKind == Kind::Q8_0 ? 34 : 18;
  __m256 acc = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b, row += kBytes, x += kBlock) {
    __m128i low;
    __m128i high;
    if constexpr (kKind == Kind::Q8_0) {
      low = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2));
      high = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 18));
    } else {
      q4_codes(row + 2, low, high);
    }
    auto widen = [](__m128i codes) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(codes)); };
    __m256 part = _mm256_mul_ps(widen(low), _mm256_loadu_ps(x));
    part = _mm256_fmadd_ps(widen(_mm_srli_si128(low, 8)), _mm256_loadu_ps(x + 8), part);
    part = _mm256_fmadd_ps(widen(high), _mm256_loadu_ps(x + 16), part);
    part = _mm256_fmadd_ps(widen(_mm_srli_si128(high, 8)), _mm256_loadu_ps(x + 24), part);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(scale_bits(row))), part, acc);
  }
  return horizontal_sum(acc);
}

#endif

template <Kind kKind>
RowDot row_dot(QuantIsa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == QuantIsa::Avx512) return dot_vnni<kKind>;
  if (isa == QuantIsa::Avx2) return dot_avx2<kKind>;
#endif
  (void)isa;
  return dot_scalar<kKind>;
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

void quantized_matvec(const TensorData& weight, std::span<const float> x, std::span<float> y,
                      QuantIsa isa) {
  constexpr std::string_view kOp = "quantized_matvec";
  if (weight.dtype() != DType::QFloat ||
      (weight.scheme().kind != Kind::Q8_0 && weight.scheme().kind != Kind::Q4_0)) {
    detail::fail<UnsupportedOperation>(kOp, "needs a Q8_0 or Q4_0 weight, got ",
                                       weight.dtype() == DType::QFloat
                                           ? quant_kind_name(weight.scheme().kind)
                                           : dtype_name(weight.dtype()));
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
  const Kind kind = weight.scheme().kind;
  const std::int64_t rows = shape[0];
  const std::int64_t blocks = shape[1] / kBlock;
  const std::int64_t row_bytes = blocks * (kind == Kind::Q8_0 ? 34 : 18);
  const std::byte* w = weight.bytes().data();
  const RowDot dot = kind == Kind::Q8_0 ? row_dot<Kind::Q8_0>(isa) : row_dot<Kind::Q4_0>(isa);
  // The VNNI kernels take x as int8 blocks (an f32 scale and 32 codes each), encoded once here.
  std::vector<std::byte> encoded;
  const std::byte* x_arg = reinterpret_cast<const std::byte*>(x.data());
  if (isa == QuantIsa::Avx512) {
    encoded.resize(static_cast<std::size_t>(blocks * (4 + kBlock)));
    quant::quantize_int8(x.data(), blocks, kBlock, encoded.data());
    x_arg = encoded.data();
  }
  parallel_for(rows,
               std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(shape[1], 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t r = begin; r < end; ++r)
                   y[r] = dot(w + r * row_bytes, x_arg, blocks);
               });
}

}  // namespace kiln::cpu
