// softmax and log_softmax along one dim (generated kernels; the CPU backend's formulas: the
// row's maximum subtracted, exponentials in the compute type (f32 for 16-bit floats), their sum
// in double; a NaN, a +inf or a row of -inf gives a row of NaN). Each line along dim is a row.
//   Rows (the dim has stride 1 in x and in the output) short enough to stay in registers: a
//   warp, a block of 256 or a block of 1024 per row, each thread holding up to kept_per_thread
//   elements: one read, one write. Longer rows: (max, sum) per chunk of a row with the online
//   rescaling, chunks combined per row, then a pass that writes.
//   Other lines: a thread per line; short ones kept in registers, long ones cut into chunks
//   with the same three passes; neighbouring threads on neighbouring lines (coalesced when the
//   lines interleave, as along dim 0 of a contiguous tensor).
// The output is laid out like x (its dims in x's stride order), so reading and writing walk
// memory the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/shape.h"

namespace kiln::cuda {

inline constexpr int kSoftmaxMaxDims = 12;

// clang-format off
// Each kernel with scalar accesses, and its *Vector twin with 16-byte ones (aligned rows).
enum class SoftmaxKernel {
  Lines,  // a thread per line of at most kept_per_thread elements, any strides
  RowsWarp, RowsWarpVector,    // a warp per row, kept in registers
  RowsBlock, RowsBlockVector,  // a block of 256 per row
  RowsWide, RowsWideVector,    // a block of 1024 per row
  RowStats, RowStatsVector,    // long rows: (max, sum) of each chunk of a row
  RowWrite, RowWriteVector,    // long rows: the outputs of each chunk
  LineStats, LineWrite,        // long strided lines, a thread per chunk of a line
  Combine,                     // the chunks' (max, sum) of each row merged
};
// clang-format on

// Mirrors struct P of the generated source (softmax_source.cpp): same members, same order.
struct SoftmaxParams {
  std::int64_t rows, length, in_step, out_step, chunks, chunk_length;
  std::int32_t rank, pad;
  std::int64_t sizes[kSoftmaxMaxDims];
  std::int64_t in_strides[kSoftmaxMaxDims];
  std::int64_t out_strides[kSoftmaxMaxDims];
  std::uint64_t in, out, partials, totals;
};

struct SoftmaxLaunch {
  SoftmaxKernel kernel;
  unsigned blocks, threads;
};

// The launches for x (shape, strides, address of element 0) along dim. out_strides: the
// output's strides (x's stride order, no gaps); out_order: its dims outermost first, so the
// output is allocated contiguous with shape x.shape permuted by out_order.
struct SoftmaxPlan {
  SoftmaxParams params{};
  std::vector<SoftmaxLaunch> launches;
  std::vector<std::int64_t> out_strides;
  std::vector<std::size_t> out_order;
  std::int64_t partial_bytes = 0, total_bytes = 0;
};
SoftmaxPlan plan_softmax(const Shape& shape, std::span<const std::int64_t> strides,
                         std::uint64_t address, std::int64_t dim, DType dtype, int sm_count,
                         const char* op);

// Elements one thread keeps in registers: 32 in f32 arithmetic, 16 in f64.
int softmax_kept_per_thread(DType dtype);
const char* softmax_kernel_name(SoftmaxKernel kernel);
struct FusedLoad;
// Generated source of one kernel (log: log_softmax's outputs); with fused, its input is the
// value of a fused chain (fused_kernel.h) instead of x in memory.
std::string softmax_kernel_source(SoftmaxKernel kernel, DType dtype, bool log,
                                  const FusedLoad* fused = nullptr);

}  // namespace kiln::cuda
