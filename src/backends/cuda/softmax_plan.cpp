// How softmax is launched (see softmax.h): the output's layout, the kernel tier by row length,
// and how long rows or lines are cut into chunks. Pure arithmetic on the shape.
#include <algorithm>
#include <limits>
#include <numeric>

#include "backends/cuda/grid_math.h"
#include "backends/cuda/softmax.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::cuda {

// The generated struct P has no padding either: 6 + 1 + 3 * 12 + 4 eight-byte words.
static_assert(sizeof(SoftmaxParams) == 47 * 8);

namespace {

constexpr unsigned kThreads = 256;
constexpr unsigned kWideThreads = 1024;
// The row kernels are built with __launch_bounds__(256, 4): at least this many blocks per SM.
constexpr std::int64_t kBlocksPerSm = 4;
constexpr std::int64_t kWaves = 2;
// A chunk of a long row is at least this many elements; of a strided line, this many.
constexpr std::int64_t kMinRowChunk = 8192;
constexpr std::int64_t kMinLineChunk = 32;
// Chunks of a line at most (each is combined by one block at the end).
constexpr std::int64_t kMaxChunks = 4096;
constexpr std::int64_t kMaxBlocks = std::int64_t(1) << 30;

unsigned grid(std::int64_t blocks) {
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, kMaxBlocks));
}

void set_chunks(SoftmaxParams& p, std::int64_t chunks, std::int64_t align) {
  chunks = std::clamp<std::int64_t>(chunks, 1, kMaxChunks);
  p.chunk_length = ceil_div(ceil_div(p.length, chunks), align) * align;
  p.chunks = ceil_div(p.length, p.chunk_length);
}

}  // namespace

int softmax_kept_per_thread(DType dtype) { return dtype == DType::F64 ? 16 : 32; }

const char* softmax_kernel_name(SoftmaxKernel k) {
  switch (k) {
    case SoftmaxKernel::Lines:
      return "kiln_softmax_lines";
    case SoftmaxKernel::RowsWarp:
      return "kiln_softmax_rows_warp";
    case SoftmaxKernel::RowsWarpVector:
      return "kiln_softmax_rows_warp_vector";
    case SoftmaxKernel::RowsBlock:
      return "kiln_softmax_rows_block";
    case SoftmaxKernel::RowsBlockVector:
      return "kiln_softmax_rows_block_vector";
    case SoftmaxKernel::RowsWide:
      return "kiln_softmax_rows_wide";
    case SoftmaxKernel::RowsWideVector:
      return "kiln_softmax_rows_wide_vector";
    case SoftmaxKernel::RowStats:
      return "kiln_softmax_row_stats";
    case SoftmaxKernel::RowStatsVector:
      return "kiln_softmax_row_stats_vector";
    case SoftmaxKernel::RowWrite:
      return "kiln_softmax_row_write";
    case SoftmaxKernel::RowWriteVector:
      return "kiln_softmax_row_write_vector";
    case SoftmaxKernel::LineStats:
      return "kiln_softmax_line_stats";
    case SoftmaxKernel::LineWrite:
      return "kiln_softmax_line_write";
    case SoftmaxKernel::Combine:
      return "kiln_softmax_combine";
  }
  return "?";
}

SoftmaxPlan plan_softmax(const Shape& shape, std::span<const std::int64_t> strides,
                         std::uint64_t address, std::int64_t dim, DType dtype, int sm_count,
                         const char* op) {
  SoftmaxPlan plan;
  SoftmaxParams& p = plan.params;
  const std::size_t rank = shape.rank(), d = static_cast<std::size_t>(dim);
  const std::int64_t size = static_cast<std::int64_t>(dtype_size(dtype));

  // The output's dims in x's memory order, outermost first: broadcast dims (stride 0) and
  // size-1 dims outside, then by falling |stride|; dim goes inside the dims it ties with.
  auto key = [&](std::size_t k) {
    const std::int64_t s = strides[k];
    if (shape[k] == 1 || s == 0) return std::numeric_limits<std::int64_t>::max();
    return s < 0 ? -s : s;
  };
  plan.out_order.resize(rank);
  std::iota(plan.out_order.begin(), plan.out_order.end(), std::size_t{0});
  std::stable_sort(plan.out_order.begin(), plan.out_order.end(), [&](std::size_t a, std::size_t b) {
    if (key(a) != key(b)) return key(a) > key(b);
    return a != d && b == d;
  });
  plan.out_strides.assign(rank, 0);
  std::int64_t step = 1;
  for (std::size_t i = rank; i-- > 0;) {
    plan.out_strides[plan.out_order[i]] = step;
    step *= shape[plan.out_order[i]];
  }

  // The other dims in that order (neighbouring rows are neighbours in memory), merged where
  // both x and the output step through the next dim without a gap.
  std::vector<std::int64_t> sizes, in_steps, out_steps;
  p.rows = 1;
  for (std::size_t k : plan.out_order) {
    if (k == d) continue;
    p.rows *= shape[k];
    if (shape[k] == 1) continue;
    if (!sizes.empty() && in_steps.back() == strides[k] * shape[k] &&
        out_steps.back() == plan.out_strides[k] * shape[k]) {
      sizes.back() *= shape[k];
      in_steps.back() = strides[k];
      out_steps.back() = plan.out_strides[k];
    } else {
      sizes.push_back(shape[k]);
      in_steps.push_back(strides[k]);
      out_steps.push_back(plan.out_strides[k]);
    }
  }
  if (sizes.size() > static_cast<std::size_t>(kSoftmaxMaxDims)) {
    detail::fail<InvalidArgument>(op, "at most ", kSoftmaxMaxDims,
                                  " dims are supported on cuda, got ", shape.to_string());
  }
  p.rank = static_cast<std::int32_t>(sizes.size());
  std::copy(sizes.begin(), sizes.end(), p.sizes);
  std::copy(in_steps.begin(), in_steps.end(), p.in_strides);
  std::copy(out_steps.begin(), out_steps.end(), p.out_strides);
  p.length = shape[d];
  p.in_step = strides[d];
  p.out_step = plan.out_strides[d];
  p.chunks = 1;
  p.chunk_length = p.length;
  if (p.rows == 0 || p.length == 0) return plan;

  const std::int64_t kept = softmax_kept_per_thread(dtype);
  const std::int64_t target_blocks = kWaves * kBlocksPerSm * std::max(sm_count, 1);
  const bool rows =
      p.in_step == 1 && p.out_step == 1 && p.length > std::min<std::int64_t>(16, kept);
  if (!rows && p.length <= kept) {
    // A thread per line. Few lines (a classifier's [4096, 10] logits: 16 blocks of 256) would
    // leave most SMs idle and queue the lines' latencies on the few: smaller blocks, down to a
    // warp, spread them over every SM.
    const std::int64_t per_sm = ceil_div(p.rows, std::max<std::int64_t>(sm_count, 1));
    const auto threads =
        static_cast<unsigned>(std::clamp<std::int64_t>(ceil_div(per_sm, 32) * 32, 32, kThreads));
    plan.launches.push_back({SoftmaxKernel::Lines, grid(ceil_div(p.rows, threads)), threads});
    return plan;
  }
  if (!rows) {
    // Long strided lines: a thread per (line, chunk), enough of them to fill every SM twice.
    const std::int64_t target_threads = kWaves * 2048 * std::max(sm_count, 1);
    set_chunks(p, std::min(target_threads / p.rows, ceil_div(p.length, kMinLineChunk)), 1);
    const unsigned blocks = grid(ceil_div(p.rows * p.chunks, kThreads));
    plan.launches.push_back({SoftmaxKernel::LineStats, blocks, kThreads});
    if (p.chunks > 1) plan.launches.push_back({SoftmaxKernel::Combine, grid(p.rows), kThreads});
    plan.launches.push_back({SoftmaxKernel::LineWrite, blocks, kThreads});
  } else {
    // Rows: 16-byte loads and stores when every row of x and of the output starts aligned.
    bool aligned = address % 16 == 0 && (p.length * size) % 16 == 0;
    for (std::size_t k = 0; aligned && k < sizes.size(); ++k) {
      aligned = (in_steps[k] * size) % 16 == 0 && (out_steps[k] * size) % 16 == 0;
    }
    auto pick = [&](SoftmaxKernel scalar, SoftmaxKernel vector) {
      return aligned ? vector : scalar;
    };
    if (p.length <= 32 * kept) {
      plan.launches.push_back({pick(SoftmaxKernel::RowsWarp, SoftmaxKernel::RowsWarpVector),
                               grid(ceil_div(p.rows, kThreads / 32)), kThreads});
    } else if (p.length <= kThreads * kept) {
      plan.launches.push_back(
          {pick(SoftmaxKernel::RowsBlock, SoftmaxKernel::RowsBlockVector), grid(p.rows), kThreads});
    } else if (p.length <= kWideThreads * kept) {
      plan.launches.push_back({pick(SoftmaxKernel::RowsWide, SoftmaxKernel::RowsWideVector),
                               grid(p.rows), kWideThreads});
    } else {
      // Chunk starts stay 16-byte aligned: lengths are multiples of 64 elements.
      set_chunks(p, std::min(target_blocks / p.rows, ceil_div(p.length, kMinRowChunk)), 64);
      const unsigned blocks = grid(p.rows * p.chunks);
      plan.launches.push_back(
          {pick(SoftmaxKernel::RowStats, SoftmaxKernel::RowStatsVector), blocks, kThreads});
      if (p.chunks > 1) plan.launches.push_back({SoftmaxKernel::Combine, grid(p.rows), kThreads});
      plan.launches.push_back(
          {pick(SoftmaxKernel::RowWrite, SoftmaxKernel::RowWriteVector), blocks, kThreads});
    }
  }
  if (p.chunks > 1) plan.partial_bytes = p.rows * p.chunks * 16;
  plan.total_bytes = p.rows * 16;
  return plan;
}

}  // namespace kiln::cuda
