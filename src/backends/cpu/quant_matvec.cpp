// Products with quantized weights (quant_matvec.h). The GGUF kinds walk each row of W once per
// 64 rows of x, its codes widened in registers and multiplied with up to four rows of x at a
// time by the kernels of quant_kernels.cpp (AVX-512 VNNI) or quant_kernels_avx2.cpp, picked at run
// time for the CPU (so one binary runs on any x86-64 CPU); this driver loops over rows and
// threads (compiled for size: a kernel call per row of W and four rows of x). Other schemes, and
// CPUs without AVX2, decode tiles of W's rows and call gemm.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include "backends/cpu/gemm.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/quant_kernels.h"
#include "backends/cpu/quant_matvec.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"
#include "kiln/quant.h"
#include "quant/blocks.h"
#include "quant/kernels.h"

namespace kiln::cpu {
namespace {

using Kind = QuantScheme::Kind;

constexpr int kBlock = kQuantBlock;
constexpr int kGroup = kQuantGroup;
// Rows of x per pass over W: the rows of a pass stay in cache (64 x 4096 values encoded:
// 288 KiB) while W streams once.
constexpr std::int64_t kPass = 64;

bool all_finite(const float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return false;
  }
  return true;
}

void product_on_decoded_tiles(const QuantMatrix& w, const float* x, std::int64_t batch, float* out);

// Every GGUF kind but Q8_K on the blocks (isa Avx2 or Avx512), x encoded as int8 blocks.
void product_on_blocks(const QuantMatrix& w, const float* x, std::int64_t batch, float* out,
                       QuantIsa isa) {
  const std::int64_t blocks = w.cols / kBlock;
  const quant::BlockSize block = quant::block_size(w.scheme, w.cols);
  const std::int64_t row_bytes = w.cols / block.values * block.bytes;
  const QuantKernels k = quant_kernels(w.scheme.kind, isa);
  // The rows of x as the kernels read them (`lanes`, each with the row of out it fills); rows
  // that are not all finite have no int8 code and go through a float kernel instead.
  std::vector<const std::byte*> lanes;
  std::vector<std::int64_t> lane_row, float_rows;
  std::vector<std::byte> encoded;
  lanes.reserve(static_cast<std::size_t>(batch));
  lane_row.reserve(static_cast<std::size_t>(batch));
  if (k.encoded) {
    const std::int64_t encoded_bytes = encoded_row_bytes(blocks);
    encoded.resize(static_cast<std::size_t>(batch * encoded_bytes));
    std::vector<char> finite(static_cast<std::size_t>(batch));
    parallel_for(batch,
                 std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(w.cols, 1)),
                 [&](std::int64_t begin, std::int64_t end) {
                   for (std::int64_t m = begin; m < end; ++m) {
                     const float* row = x + m * w.cols;
                     finite[static_cast<std::size_t>(m)] = all_finite(row, w.cols);
                     if (finite[static_cast<std::size_t>(m)]) {
                       encode_row(row, blocks, encoded.data() + m * encoded_bytes, isa);
                     }
                   }
                 });
    for (std::int64_t m = 0; m < batch; ++m) {
      if (!finite[static_cast<std::size_t>(m)]) {
        float_rows.push_back(m);
        continue;
      }
      lanes.push_back(encoded.data() + m * encoded_bytes);
      lane_row.push_back(m);
    }
  } else {
    for (std::int64_t m = 0; m < batch; ++m) {
      lanes.push_back(reinterpret_cast<const std::byte*>(x + m * w.cols));
      lane_row.push_back(m);
    }
  }
  const QuantKernels plain = float_x_kernels(w.scheme.kind);
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
                 if (plain.one == nullptr) return;  // below
                 for (std::int64_t m : float_rows) {
                   const auto* xm = reinterpret_cast<const std::byte*>(x + m * w.cols);
                   for (std::int64_t r = begin; r < end; ++r) {
                     plain.one(w.blocks + r * row_bytes, &xm, blocks, &out[m * w.rows + r]);
                   }
                 }
               });
  // Rows of x that are not all finite, for a kind without a float kernel on its blocks (all
  // but Q8_0 and Q4_0):
  // on decoded tiles, a row at a time.
  if (plain.one == nullptr) {
    for (std::int64_t m : float_rows) {
      product_on_decoded_tiles(w, x + m * w.cols, 1, out + m * w.rows);
    }
  }
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

#if defined(__x86_64__) && defined(__GNUC__)
namespace {
// CPUID leaf 1's F16C bit (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
// Asked once: in a virtual machine each CPUID traps to the hypervisor (microseconds).
bool has_f16c() noexcept {
  static const bool f16c = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return f16c;
}
}  // namespace
#endif

bool cpu_has(QuantIsa isa) noexcept {
#if defined(__x86_64__) && defined(__GNUC__)
  switch (isa) {
    case QuantIsa::Scalar:
      return true;
    case QuantIsa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case QuantIsa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
             __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("gfni") &&
             cpu_has(QuantIsa::Avx2);
  }
  return false;
#else
  return isa == QuantIsa::Scalar;
#endif
}

bool rounds_x_to_int8(QuantScheme::Kind kind, QuantIsa isa) noexcept {
  return isa != QuantIsa::Scalar && quant_kernels(kind, isa).encoded;
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
  const bool on_blocks =
      isa != QuantIsa::Scalar && quant_kernels(w.scheme.kind, isa).one != nullptr;
  if (on_blocks) return product_on_blocks(w, x, batch, out, isa);
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
