// How a reduction is launched (see reduce.h): which kernel, how many blocks, how long lines are
// cut into chunks. Pure arithmetic on the shape, so the plan is tested without a GPU.
#include <algorithm>

#include "backends/cuda/grid_math.h"
#include "backends/cuda/reduce.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::cuda {

// The generated struct P has no padding either: 5 + 1 + 2 * 12 + 3 + 1 eight-byte words.
static_assert(sizeof(ReduceParams) == 34 * 8);

namespace {

constexpr unsigned kThreads = 256;
// Every kernel is built with __launch_bounds__(256, 4): at least this many blocks per SM.
constexpr std::int64_t kBlocksPerSm = 4;
// Split lines until there are this many waves of resident blocks (or the chunks get short).
constexpr std::int64_t kWaves = 2;
// Contiguous lines up to this many bytes take a warp each, longer ones a block.
constexpr std::int64_t kWarpLineBytes = 8192;
// A chunk of a contiguous line is at least this long: a few 16-byte loads per thread.
constexpr std::int64_t kMinChunkBytes = 16384;
// Chunks finished by a block each (rather than a warp) above this many partials.
constexpr std::int64_t kBlockFinishChunks = 64;
constexpr std::int64_t kMaxBlocks = std::int64_t(1) << 30;

unsigned grid(std::int64_t blocks) {
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, kMaxBlocks));
}

// Cuts a line of p.length elements into about `chunks` pieces whose lengths are multiples of
// align (so chunk starts stay 16-byte aligned when the line is); no piece is empty.
void set_chunks(ReduceParams& p, std::int64_t chunks, std::int64_t align) {
  if (p.length == 0 || chunks <= 1) {
    p.chunks = 1;
    p.chunk_length = p.length;
    return;
  }
  p.chunk_length = ceil_div(ceil_div(p.length, chunks), align) * align;
  p.chunks = ceil_div(p.length, p.chunk_length);
}

}  // namespace

const char* reduce_kernel_name(ReduceKernel k) {
  switch (k) {
    case ReduceKernel::LinesWarp:
      return "kiln_reduce_lines_warp";
    case ReduceKernel::LinesBlock:
      return "kiln_reduce_lines_block";
    case ReduceKernel::Columns:
      return "kiln_reduce_columns";
    case ReduceKernel::ColumnsVector:
      return "kiln_reduce_columns_vector";
    case ReduceKernel::FinishWarp:
      return "kiln_reduce_finish_warp";
    case ReduceKernel::FinishBlock:
      return "kiln_reduce_finish_block";
  }
  return "?";
}

ReducePlan plan_reduce(const Shape& shape, std::span<const std::int64_t> strides,
                       std::uint64_t address, std::int64_t dim, DType dtype, int sm_count,
                       const char* op) {
  ReducePlan plan;
  ReduceParams& p = plan.params;
  const std::size_t d = static_cast<std::size_t>(dim);
  const std::int64_t size = static_cast<std::int64_t>(dtype_size(dtype));
  // The kept dims, innermost last, merged where one steps through the next without a gap.
  std::vector<std::int64_t> sizes, steps;
  p.outputs = 1;
  for (std::size_t k = 0; k < shape.rank(); ++k) {
    if (k == d) continue;
    p.outputs *= shape[k];
    if (shape[k] == 1) continue;
    if (!sizes.empty() && steps.back() == strides[k] * shape[k]) {
      sizes.back() *= shape[k];
      steps.back() = strides[k];
    } else {
      sizes.push_back(shape[k]);
      steps.push_back(strides[k]);
    }
  }
  if (sizes.size() > static_cast<std::size_t>(kReduceMaxDims)) {
    detail::fail<InvalidArgument>(op, "at most ", kReduceMaxDims,
                                  " dims are supported on cuda, got ", shape.to_string());
  }
  p.rank = static_cast<std::int32_t>(sizes.size());
  std::copy(sizes.begin(), sizes.end(), p.sizes);
  std::copy(steps.begin(), steps.end(), p.strides);
  p.length = shape[d];
  p.reduce_stride = p.length > 1 ? strides[d] : 0;
  p.divisor = static_cast<double>(p.length);
  p.lanes = 1;
  if (p.outputs == 0) return plan;

  const std::int64_t target = kWaves * kBlocksPerSm * std::max(sm_count, 1);
  if (p.reduce_stride == 1 && p.length >= 32) {
    // Contiguous lines (a whole contiguous tensor is one line).
    const bool warp = p.length * size <= kWarpLineBytes;
    std::int64_t chunks = 1;
    if (!warp && p.outputs < target) {
      const std::int64_t longest = ceil_div(p.length, kMinChunkBytes / size);
      chunks = std::clamp<std::int64_t>(target / p.outputs, 1, longest);
    }
    set_chunks(p, chunks, 64);
    const std::int64_t items = p.outputs * p.chunks;
    if (warp)
      plan.launches.push_back(
          {ReduceKernel::LinesWarp, grid(ceil_div(items, kThreads / 32)), kThreads});
    else
      plan.launches.push_back({ReduceKernel::LinesBlock, grid(items), kThreads});
  } else {
    // Strided (or very short) lines: a thread per output, or per `vector` adjacent outputs read
    // with one load when every such group starts aligned.
    const std::int64_t vector = std::min<std::int64_t>(4, 16 / size);
    bool aligned = vector > 1 && p.rank >= 1 && steps.back() == 1 && sizes.back() % vector == 0 &&
                   p.reduce_stride % vector == 0 &&
                   address % static_cast<std::uint64_t>(vector * size) == 0;
    for (std::size_t k = 0; aligned && k + 1 < steps.size(); ++k) aligned = steps[k] % vector == 0;
    const std::int64_t per_thread = aligned ? vector : 1;
    p.lanes = p.length >= 64 ? 8 : p.length >= 32 ? 4 : p.length >= 16 ? 2 : 1;
    const std::int64_t columns_per_block = kThreads / p.lanes;
    const std::int64_t tiles = ceil_div(p.outputs / per_thread, columns_per_block);
    // Chunks of at least 16 elements per lane: splitting a short line (a classifier's 10
    // logits, a bias's gradient over a batch of 128) gains less than the finishing kernel's
    // launch costs (in a captured training step, a graph node of about 2 us).
    std::int64_t chunks = 1;
    if (tiles < target)
      chunks = std::clamp<std::int64_t>(target / tiles, 1,
                                        std::max<std::int64_t>(1, p.length / (16 * p.lanes)));
    set_chunks(p, chunks, 1);
    plan.launches.push_back({aligned ? ReduceKernel::ColumnsVector : ReduceKernel::Columns,
                             grid(tiles * p.chunks), kThreads});
  }
  if (p.chunks > 1) {
    plan.scratch_bytes = p.outputs * p.chunks * 32;  // 32 bytes hold every accumulator
    if (p.chunks > kBlockFinishChunks)
      plan.launches.push_back({ReduceKernel::FinishBlock, grid(p.outputs), kThreads});
    else
      plan.launches.push_back(
          {ReduceKernel::FinishWarp, grid(ceil_div(p.outputs, kThreads / 32)), kThreads});
  }
  return plan;
}

}  // namespace kiln::cuda
