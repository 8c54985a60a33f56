// A fused group on the CPU: the steps run tile by tile over the iteration shape, each tile small
// enough that every intermediate stays in the core's L2 cache, all tiles in one parallel region.
// A step on a tile is the backend's own op on views of the tile (the same 1-D kernels as eager
// execution, so results are the eager ones bit for bit), run on one thread; an intermediate is
// handed to its last reader, which reuses its memory, so a tile's values cycle through a few
// cache-resident buffers. Only the values the group must return are written to memory.
//
// A tile is a box of the iteration shape S: fixed coordinates in the dims before a split dim p, a
// range of rows in p, and every dim after p whole, so that an op along a dim (softmax, sum_dim)
// finds whole lines in each tile. p is the outermost dim whose inner part fits in kTileElements,
// and lies before every such op's dim; a group that reduces along dim 0 runs step by step.
#include <algorithm>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/stream_store.h"
#include "contract/fused_program.h"

namespace kiln {

using namespace cpu;

namespace {

// Elements of the iteration shape per tile: with a handful of live f32 values (64 KiB each), a
// tile's working set is a few hundred KiB, inside a core's L2 (2 MiB on the development machine;
// 4096 to 65536 measured within noise of each other on chain8, fma_exp and softmax).
constexpr std::int64_t kTileElements = 16384;

struct Tiling {
  std::size_t split = 0;       // p
  std::int64_t rows = 1;       // rows of dim p per tile
  std::int64_t row_tiles = 1;  // tiles along dim p
  std::int64_t tiles = 0;
};

// The tiling of program's iteration shape, or none (tiles == 0) when it does not pay or cannot
// keep the lines of an op along a dim whole.
Tiling plan_tiles(const FusedProgram& program) {
  const Shape& s = program.shape;
  const std::size_t rank = s.rank();
  const std::int64_t elements = s.num_elements();
  if (rank == 0 || program.steps.size() < 2 || elements < 2 * kTileElements) return {};
  std::size_t first_line = rank;
  for (const FusedStep& step : program.steps) {
    if (step.dim() >= 0) first_line = std::min(first_line, static_cast<std::size_t>(step.dim()));
  }
  if (first_line == 0) return {};
  Tiling t;
  t.split = rank - 1;
  std::int64_t inner = 1;  // elements of the dims after split
  while (t.split > 0 && t.split >= first_line) inner *= s[t.split--];
  while (t.split > 0 && inner * s[t.split] <= kTileElements) inner *= s[t.split--];
  t.rows =
      std::clamp<std::int64_t>(kTileElements / std::max<std::int64_t>(inner, 1), 1, s[t.split]);
  t.row_tiles = (s[t.split] + t.rows - 1) / t.rows;
  std::int64_t outer = 1;
  for (std::size_t d = 0; d < t.split; ++d) outer *= s[d];
  t.tiles = outer * t.row_tiles;
  return t;
}

// The box of tile `index`: coordinates of the dims before the split, the first row and count.
struct Box {
  detail::DimVector coords;
  std::int64_t row = 0;
  std::int64_t rows = 0;
};

Box box_of(const Tiling& t, const Shape& s, std::int64_t index) {
  Box box;
  box.coords.resize(t.split);
  const std::int64_t row_tile = index % t.row_tiles;
  std::int64_t rest = index / t.row_tiles;
  for (std::size_t d = t.split; d-- > 0;) {
    box.coords[d] = rest % s[d];
    rest /= s[d];
  }
  box.row = row_tile * t.rows;
  box.rows = std::min(t.rows, s[t.split] - box.row);
  return box;
}

// The part of x (broadcastable to the iteration shape of rank `rank`, aligned right) inside box:
// a view, size 1 where x is broadcast or the box fixes a coordinate.
Primitive tile_view(const CpuTensor& x, const Tiling& t, const Box& box, std::size_t rank) {
  const Shape& shape = x.shape();
  const std::size_t lead = rank - shape.rank();
  detail::DimVector dims(shape.rank());
  Strides strides(shape.rank());
  std::int64_t offset = x.offset();
  for (std::size_t j = 0; j < shape.rank(); ++j) {
    const std::size_t d = j + lead;
    const bool broadcast = shape[j] == 1;
    strides[j] = x.strides()[j];
    if (d < t.split) {
      dims[j] = 1;
      if (!broadcast) offset += box.coords[d] * x.strides()[j];
    } else if (d == t.split) {
      dims[j] = broadcast ? 1 : box.rows;
      if (!broadcast) offset += box.row * x.strides()[j];
    } else {
      dims[j] = shape[j];
    }
  }
  return std::make_shared<CpuTensor>(x, Shape(std::move(dims)), std::move(strides), offset);
}

// dst = src; for two contiguous views of the same bytes, with stores that bypass the cache
// (stream_store.h): an output is not read again by this group.
void write_out(const Primitive& src, const Primitive& dst) {
  const CpuTensor& from = as_cpu(src);
  CpuTensor& to = as_cpu(dst);
  if (from.is_contiguous() && to.is_contiguous() && from.dtype() == to.dtype() &&
      from.shape() == to.shape()) {
    stream_bytes(to.data(), from.data(),
                 to.shape().num_elements() * static_cast<std::int64_t>(dtype_size(to.dtype())));
    return;
  }
  copy_strided(from, to);
}

}  // namespace

std::vector<Primitive> CpuBackend::run_fused(const FusedProgram& program) {
  const Tiling tiling = plan_tiles(program);
  if (tiling.tiles == 0) return run_steps(*this, program);
  const std::vector<std::int32_t> last_use = last_uses(program);
  const std::size_t rank = program.shape.rank();
  const std::size_t leaves = program.leaves.size();
  std::vector<Primitive> outputs;
  outputs.reserve(program.outputs.size());
  for (std::int32_t out : program.outputs) {
    const FusedStep& step = program.steps[static_cast<std::size_t>(out)];
    outputs.push_back(make_tensor(step.dtype, step.shape));
  }
  parallel_for(tiling.tiles, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<Primitive> values;
    for (std::int64_t index = begin; index < end; ++index) {
      const Box box = box_of(tiling, program.shape, index);
      values.clear();
      for (const Primitive& leaf : program.leaves) {
        values.push_back(tile_view(as_cpu(leaf), tiling, box, rank));
      }
      run_steps_on(*this, program, last_use, values);
      for (std::size_t k = 0; k < outputs.size(); ++k) {
        const Primitive piece = tile_view(as_cpu(outputs[k]), tiling, box, rank);
        const auto at = leaves + static_cast<std::size_t>(program.outputs[k]);
        write_out(values[at], piece);
      }
    }
  });
#if defined(__AVX512F__)
  _mm_sfence();  // the streaming stores are seen before the outputs are read
#endif
  return outputs;
}

}  // namespace kiln
