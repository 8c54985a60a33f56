// Inclusive scans (cumsum, cumprod, cummin, cummax) along the rows of a contiguous [rows, n]
// buffer, with the CPU backend's dtype semantics (src/backends/cpu/cpu_scan.cpp):
//   - float sums and products accumulate in double and each output is rounded from it
//     (f16/bf16 through float, as the CPU does);
//   - integer sums and products wrap around (64-bit modular arithmetic, then the dtype's width);
//   - cummin/cummax compare in the dtype's compute type, keep the earlier of equal values (the
//     sign of a zero) and keep a NaN once seen (PyTorch).
// Generated kernels, compiled by NVRTC per (kernel, op, dtype) on first use; every block has
// kScanBlock threads:
//   RowsThread   a thread per row of at most kScanThreadRowMax elements, left to right
//   RowsWarp     a warp per row (short rows, or enough rows to fill the GPU with warps); the warp
//                walks its row in sub-tiles of 32 x items elements, moved through shared memory
//                so that loads and stores are coalesced and each lane scans `items` neighbours
//   Chunks       few, long rows: a block per chunk (a run of tiles of 256 x items elements),
//                each chunk starting from the total of the chunks before it in its row
//   ChunkTotals  the chunks' totals, launched before Chunks when a row has several chunks
// Every element's value is combined in a fixed order (no atomics, no look-back), so results do
// not depend on timing; the order differs from the CPU's left-to-right loop, so float sums and
// products can differ in the last bit of the double accumulator. cuda_scan.cpp launches it.
//
// Usage (cumsum of x[rows, n] f32 into y, which may be x itself):
//   const ScanDesc desc{.dtype = DType::F32, .rows = rows, .n = n, .op = ScanOp::Sum};
//   const ScanPlan plan = plan_scan(desc);  // validates desc
//   ScanParams p = plan.params;             // + in, out, and partials (plan.workspace_bytes)
//   for (const ScanLaunch& launch : plan.launches) {
//     // compile scan_kernel_source(launch.kernel, desc.op, desc.dtype) under its
//     // scan_kernel_key, launch scan_kernel_name(launch.kernel) with launch.blocks x kScanBlock
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/dtype.h"

namespace kiln::cuda {

enum class ScanOp : std::uint8_t { Sum, Prod, Min, Max };

struct ScanDesc {
  DType dtype = DType::F32;  // every float and integer dtype (not Bool)
  std::int64_t rows = 1;     // independent rows, each of n elements, row-major and contiguous
  std::int64_t n = 0;
  ScanOp op = ScanOp::Sum;
};

// Throws InvalidArgument naming the op and the values (UnsupportedDType for the dtype) when desc
// cannot be scanned.
void validate(const ScanDesc& desc);

inline constexpr unsigned kScanBlock = 256;  // threads of every scan kernel's blocks
// Rows up to this long take a thread each: a warp would leave most lanes idle.
inline constexpr std::int64_t kScanThreadRowMax = 16;
// From this many rows a warp per row fills an H100/H200 (132 SMs x 31 warps, each with a
// sub-tile of loads in flight), whatever the row length.
inline constexpr std::int64_t kScanWarpRows = 4096;
// Rows of at most this many sub-tiles take a warp each however few they are.
inline constexpr std::int64_t kScanWarpRowSubTiles = 4;
// Chunks cut long rows until there are about this many blocks (a wave of 256-thread blocks).
inline constexpr std::int64_t kScanTargetBlocks = 1024;
// Grids beyond this loop inside the kernels.
inline constexpr std::int64_t kScanMaxBlocks = std::int64_t{1} << 20;

enum class ScanKernel { RowsThread, RowsWarp, Chunks, ChunkTotals };

// Mirrors struct P of the generated source (scan_source.cpp): same members, same order.
// partials: the workspace, [rows, chunks] accumulators when chunks > 1.
struct ScanParams {
  std::int64_t rows, n, chunks, tiles_per_chunk;
  std::uint64_t in, out, partials;
};

struct ScanLaunch {
  ScanKernel kernel;
  unsigned blocks;
};

// The launches for desc (none when there is nothing to scan), their parameters (in, out and
// partials left 0) and the partials' workspace bytes (0 unless rows have several chunks;
// 256-byte aligned). Pure host arithmetic, so tests check it without a GPU.
struct ScanPlan {
  ScanParams params{};
  std::vector<ScanLaunch> launches;
  std::size_t workspace_bytes = 0;
};
// Validates desc.
ScanPlan plan_scan(const ScanDesc& desc);

// Elements each thread scans per sub-tile: 32 bytes of narrow types, between 4 and 16.
int scan_items_per_thread(DType dtype);
// Bytes of one accumulator (a partial of ChunkTotals) of op over dtype.
std::size_t scan_accumulator_bytes(ScanOp op, DType dtype);

// "cumsum", "cumprod", "cummin", "cummax".
const char* scan_op_name(ScanOp op);
// The name of the kernel's entry point, and its module's key for the compiler, e.g.
// "scan:chunks:cumsum:f32". Integer sums and products of one width share a module (their
// wrapping results do not depend on the sign), keyed by the unsigned dtype of that width.
const char* scan_kernel_name(ScanKernel kernel);
std::string scan_kernel_key(ScanKernel kernel, ScanOp op, DType dtype);
// Generated source of one kernel.
std::string scan_kernel_source(ScanKernel kernel, ScanOp op, DType dtype);

}  // namespace kiln::cuda
