// Row scans on the host (scan.h): validation, which kernel a shape takes, how long rows are cut
// into chunks, and the partials' workspace.
#include <algorithm>
#include <limits>

#include "backends/cuda/grid_math.h"
#include "backends/cuda/lib/workspace.h"
#include "backends/cuda/scan.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::cuda {

// The generated struct P has no padding either: seven eight-byte words.
static_assert(sizeof(ScanParams) == 7 * 8);

namespace {

constexpr std::int64_t kWarpsPerBlock = kScanBlock / 32;

unsigned grid(std::int64_t blocks) {
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, kScanMaxBlocks));
}

bool is_known(ScanOp op) {
  return op == ScanOp::Sum || op == ScanOp::Prod || op == ScanOp::Min || op == ScanOp::Max;
}

}  // namespace

const char* scan_op_name(ScanOp op) {
  switch (op) {
    case ScanOp::Sum:
      return "cumsum";
    case ScanOp::Prod:
      return "cumprod";
    case ScanOp::Min:
      return "cummin";
    case ScanOp::Max:
      return "cummax";
  }
  return "scan";
}

void validate(const ScanDesc& desc) {
  if (!is_known(desc.op)) {
    detail::fail<InvalidArgument>("scan", "unknown scan op ", static_cast<int>(desc.op));
  }
  const char* op = scan_op_name(desc.op);
  if (desc.rows < 0 || desc.n < 0) {
    detail::fail<InvalidArgument>(op, "rows ", desc.rows, " and n ", desc.n,
                                  " must not be negative");
  }
  if (desc.n > 0 && desc.rows > std::numeric_limits<std::int64_t>::max() / desc.n) {
    detail::fail<InvalidArgument>(op, "rows ", desc.rows, " x n ", desc.n, " overflows");
  }
  if (!is_float(desc.dtype) && !is_int(desc.dtype)) {
    detail::fail<UnsupportedDType>(op, "cannot scan dtype ", dtype_name(desc.dtype));
  }
}

int scan_items_per_thread(DType dtype) {
  return static_cast<int>(std::clamp<std::size_t>(32 / dtype_size(dtype), 4, 16));
}

std::size_t scan_accumulator_bytes(ScanOp op, DType dtype) {
  // Sums and products in double or 64-bit integers (32-bit for narrower integers: the same
  // residue); extrema in the compute type, narrow integers widened to int.
  if (op == ScanOp::Sum || op == ScanOp::Prod) {
    return is_float(dtype) || dtype_size(dtype) == 8 ? 8 : 4;
  }
  return dtype_size(dtype) == 8 ? 8 : 4;
}

ScanPlan plan_scan(const ScanDesc& desc) {
  validate(desc);
  ScanPlan plan;
  ScanParams& p = plan.params;
  p.rows = desc.rows;
  p.n = desc.n;
  p.chunks = 1;
  p.tiles_per_chunk = 1;
  if (desc.rows == 0 || desc.n == 0) return plan;

  const std::int64_t items = scan_items_per_thread(desc.dtype);
  const std::int64_t sub_tile = 32 * items;
  const std::int64_t tile = std::int64_t{kScanBlock} * items;
  if (desc.n <= kScanThreadRowMax) {
    plan.launches.push_back({ScanKernel::RowsThread, grid(ceil_div(desc.rows, kScanBlock))});
    return plan;
  }
  if (desc.n <= kScanWarpRowSubTiles * sub_tile || desc.rows >= kScanWarpRows) {
    plan.launches.push_back({ScanKernel::RowsWarp, grid(ceil_div(desc.rows, kWarpsPerBlock))});
    return plan;
  }
  // Fewer than kScanWarpRows long rows: whole tiles per chunk, enough chunks for a wave.
  const std::int64_t tiles = ceil_div(desc.n, tile);
  const std::int64_t chunks = std::min(tiles, ceil_div(kScanTargetBlocks, desc.rows));
  p.tiles_per_chunk = ceil_div(tiles, chunks);
  p.chunks = ceil_div(tiles, p.tiles_per_chunk);
  const unsigned blocks = grid(desc.rows * p.chunks);
  if (p.chunks > 1) {
    plan.launches.push_back({ScanKernel::ChunkTotals, blocks});
    plan.workspace_bytes = lib::align_up(static_cast<std::size_t>(desc.rows * p.chunks) *
                                         scan_accumulator_bytes(desc.op, desc.dtype));
  }
  plan.launches.push_back({ScanKernel::Chunks, blocks});
  return plan;
}

}  // namespace kiln::cuda
