// A fused group on the CPU. A group of elementwise steps whose kernels their op families make
// (most arithmetic, unary maths and activations) runs each step's 1-D kernel on short pieces of
// the iteration space (run_pieces, below). Any other group of two or more steps runs tile by
// tile over the iteration shape, each tile small enough that every intermediate stays in the
// core's L2 cache, all tiles in one parallel region.
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
#include <array>
#include <cstring>
#include <memory>
#include <optional>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/random.h"
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

// A random step's values in box: the box is one run of flat indices of the iteration shape
// (fixed coordinates before the split dim, whole dims after it), drawn as the op draws them.
Primitive random_tile(const FusedStep& step, const Tiling& t, const Box& box) {
  const Shape& s = step.shape;
  std::int64_t inner = 1;
  for (std::size_t d = t.split + 1; d < s.rank(); ++d) inner *= s[d];
  std::int64_t begin = 0;
  for (std::size_t d = 0; d < t.split; ++d) begin = begin * s[d] + box.coords[d];
  begin = (begin * s[t.split] + box.row) * inner;
  detail::DimVector dims(s.rank(), 1);
  dims[t.split] = box.rows;
  for (std::size_t d = t.split + 1; d < s.rank(); ++d) dims[d] = s[d];
  auto tile = make_tensor(step.dtype, Shape(std::move(dims)));
  draw_random(tile->data(), step.dtype, step.params.distribution, step.params.stream, begin,
              box.rows * inner);
  return tile;
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

// ---- groups of elementwise steps: every step's own 1-D kernel on short pieces ----
//
// When every step is an elementwise op whose family makes its kernel (elementwise.h's
// OwnedKernel: the same kernel its eager op runs), the group needs no views, tensors or op
// calls per tile: each piece of kPieceElements positions runs every step's loop in turn on
// per-thread buffers that stay in L1, and the outputs are copied out. The inputs of the piece
// after next are fetched while this one computes: a group that streams its inputs and does maths
// in between otherwise waits on memory at the start of each piece. Measured on chain8 and
// fma_exp 4096^2 (2 threads): 128 to 256 elements with the fetch ahead were best (chain8 16-17
// ms, against 19-26 ms without it and 22.8 ms for the tiles below); 512 and more were slower.
// Once a piece no longer waited for its streamed output (stream_store.h) and spread its fetches
// over its steps, a step's call per piece counted for more: chain8 with 256 / 512 / 1024
// elements, five interleaved rounds on a loaded machine, 9.1-11.1 / 8.0-10.7 / 7.5-10.4 ms,
// 256 the slowest in four rounds of five; fma_exp within noise. 512 keeps a piece's buffers and
// fetched lines in L1.

constexpr std::int64_t kPieceElements = 512;
constexpr std::int64_t kFetchAhead = 2;  // pieces

// The stores of a small kernel's output are as-is when its storage is what the kernel writes (an
// integer of the kernel's width: the sign-blind kernels), as in the elementwise driver.
bool runs_as_is(DType storage, DType kernel) noexcept {
  return storage == kernel ||
         (is_int(storage) && is_int(kernel) && dtype_size(storage) == dtype_size(kernel));
}

// How a leaf is read at a position p of the iteration space, split as p = row * R + column
// (R: the plan's row length): all of it (p), along the rows (column: a leaf of the trailing
// dims, a bias), one per row (row: a leaf of the leading dims), one element for all, or as a
// strided view of the iteration shape (a transposed gradient: R is then the last dim, whose
// stride the kernels step by, and a row's start comes from the other dims' strides).
enum class LeafRead : std::uint8_t { All, Column, Row, One, Strided };

struct PiecePlan {
  // One per step, made in place (not movable), one allocation for the group.
  std::unique_ptr<OwnedKernel[]> kernels;
  std::vector<const std::byte*> leaf_data;  // each leaf's first element
  std::vector<LeafRead> leaf_read;
  std::vector<const CpuTensor*> leaf_tensor;  // for a strided leaf's strides
  std::vector<std::int64_t> value_bytes;      // bytes of an element of every value
  std::int64_t row_length = 0;                // R: pieces never cross a row
  // The buffer (of a piece) each step writes: one whose value was read for the last
  // time by the step itself, where there is one, so a chain cycles through a few buffers in L1.
  std::vector<std::int32_t> slot;
  std::int32_t slots = 0;
};

// A group over fewer positions than this fits the caches whole: nothing streams, so its pieces
// are longer (kCachedPieceElements), for fewer kernel calls.
constexpr std::int64_t kStreamingPositions = std::int64_t{1} << 16;
constexpr std::int64_t kCachedPieceElements = 4096;

// How leaf (contiguous, right-aligned to shape) is read, and the row length that split needs
// (0 for All and One); false when it is none of these.
bool leaf_read_of(const Shape& leaf, const Shape& shape, LeafRead& read, std::int64_t& row) {
  const std::int64_t count = leaf.num_elements();
  row = 0;
  if (count == 1) {
    read = LeafRead::One;
    return true;
  }
  if (leaf == shape) {
    read = LeafRead::All;
    return true;
  }
  // Its dims against shape's from the right: equal ones, then ones (Row); or ones, then equal
  // ones from the left (Column). Dims it lacks count as ones.
  const std::size_t rank = shape.rank(), lead = rank - leaf.rank();
  const auto dim = [&](std::size_t d) { return d < lead ? std::int64_t{1} : leaf[d - lead]; };
  std::size_t split = 0;  // the first dim of the trailing part
  while (split < rank && dim(split) == 1 && shape[split] != 1) ++split;
  bool column = split > 0;
  for (std::size_t d = split; d < rank; ++d) column = column && dim(d) == shape[d];
  if (column) {
    read = LeafRead::Column;
    row = count;
    return true;
  }
  split = rank;
  while (split > 0 && dim(split - 1) == 1 && shape[split - 1] != 1) --split;
  bool leading = split < rank;
  for (std::size_t d = 0; d < split; ++d) leading = leading && dim(d) == shape[d];
  if (leading) {
    read = LeafRead::Row;
    row = shape.num_elements() / count;
    return true;
  }
  return false;
}

// The plan, or false when a step is not elementwise, has no kernel of its own, reads or writes a
// dtype its kernel does not run as it is (16-bit floats go through f32 tiles), or a leaf
// broadcasts other than over leading or trailing dims, or is a strided view of another shape, or
// two leaves would need different rows.
bool plan_pieces(const FusedProgram& program, PiecePlan& plan) {
  const std::int64_t positions = program.shape.num_elements();
  plan.row_length = positions;
  bool split = false;
  plan.leaf_data.reserve(program.leaves.size());
  plan.leaf_read.reserve(program.leaves.size());
  plan.leaf_tensor.reserve(program.leaves.size());
  plan.value_bytes.reserve(program.leaves.size() + program.steps.size());
  plan.slot.reserve(program.steps.size());
  for (const Primitive& leaf : program.leaves) {
    const CpuTensor& t = as_cpu(leaf);
    LeafRead read = LeafRead::All;
    std::int64_t row = 0;
    if (t.is_contiguous() || t.shape().num_elements() == 1) {
      if (!leaf_read_of(t.shape(), program.shape, read, row)) return false;
    } else if (t.shape() == program.shape) {
      read = LeafRead::Strided;
      row = program.shape[program.shape.rank() - 1];
    } else {
      return false;
    }
    if (row != 0) {
      if (split && row != plan.row_length) return false;
      split = true;
      plan.row_length = row;
    }
    plan.leaf_data.push_back(t.data());
    plan.leaf_read.push_back(read);
    plan.leaf_tensor.push_back(&t);
    plan.value_bytes.push_back(static_cast<std::int64_t>(dtype_size(t.dtype())));
  }
  const std::size_t leaves = program.leaves.size();
  plan.kernels = std::make_unique<OwnedKernel[]>(program.steps.size());
  for (const FusedStep& step : program.steps) {
    if (step.dim() >= 0 || step.shape.num_elements() != positions) return false;
    if (step.op == OpCode::random) {  // drawn for each piece's positions (draw_random)
      plan.value_bytes.push_back(static_cast<std::int64_t>(dtype_size(step.dtype)));
      continue;
    }
    if (step.arity == 0) return false;
    const auto dtype_of_value = [&](std::int32_t v) {
      const auto at = static_cast<std::size_t>(v);
      return at < leaves ? program.leaves[at]->dtype() : program.steps[at - leaves].dtype;
    };
    bool contiguous = true;
    for (std::uint8_t k = 0; k < step.arity; ++k) {
      const auto v = static_cast<std::size_t>(step.inputs[k]);
      const LeafRead read = v < leaves ? plan.leaf_read[v] : LeafRead::All;
      const bool unit_steps =
          read == LeafRead::All || read == LeafRead::Column ||
          (read == LeafRead::Strided && plan.leaf_tensor[v]->strides().back() == 1);
      contiguous = contiguous && unit_steps;
    }
    OwnedKernel* kernel = &plan.kernels[static_cast<std::size_t>(&step - program.steps.data())];
    const DType in = dtype_of_value(step.inputs[0]);
    bool made = false;
    try {
      // The first family that has the op makes its kernel.
#define KILN_CPU_TRY_STEP_KERNEL(family) \
  || family##_step_kernel(step.op, in, step.params, contiguous, *kernel)
      made = false KILN_CPU_STEP_KERNEL_FAMILIES(KILN_CPU_TRY_STEP_KERNEL);
#undef KILN_CPU_TRY_STEP_KERNEL
    } catch (const Error&) {
      return false;  // a dtype the op does not run: the step by step path says so
    }
    if (!made || !runs_as_is(step.dtype, kernel->kernel().out)) return false;
    for (std::uint8_t k = 0; k < step.arity; ++k) {
      const Kernel& made_kernel = kernel->kernel();
      const DType want = made_kernel.mask_input == k ? DType::Bool : made_kernel.in;
      if (!runs_as_is(dtype_of_value(step.inputs[k]), want)) return false;
    }
    plan.value_bytes.push_back(static_cast<std::int64_t>(dtype_size(step.dtype)));
  }
  // Slots: an input read for the last time by a step may hold the step's output (an elementwise
  // kernel reads element j before it writes element j: in place is safe when the output's
  // elements are no wider than the input's; a wider one, a cast from f32 to f64, would overwrite
  // elements not yet read). Its buffer is free for the steps after it in any case.
  const std::vector<std::int32_t> last_use = last_uses(program);
  std::vector<std::int32_t> free_slots;
  for (std::size_t i = 0; i < program.steps.size(); ++i) {
    const FusedStep& step = program.steps[i];
    const std::int64_t bytes = plan.value_bytes[leaves + i];
    std::array<std::int32_t, 3> released{-1, -1, -1};
    std::int32_t in_place = -1;
    for (std::uint8_t k = 0; k < step.arity; ++k) {
      const auto v = static_cast<std::size_t>(step.inputs[k]);
      bool again = false;  // x * x gives its buffer back once
      for (std::uint8_t j = 0; j < k; ++j) again = again || step.inputs[j] == step.inputs[k];
      if (v >= leaves && !again && last_use[v] == static_cast<std::int32_t>(i)) {
        released[k] = plan.slot[v - leaves];
        if (in_place < 0 && plan.value_bytes[v] >= bytes) in_place = released[k];
      }
    }
    if (in_place >= 0) {
      plan.slot.push_back(in_place);
    } else if (!free_slots.empty()) {
      plan.slot.push_back(free_slots.back());
      free_slots.pop_back();
    } else {
      plan.slot.push_back(plan.slots++);
    }
    for (const std::int32_t slot : released) {
      if (slot >= 0 && slot != in_place) free_slots.push_back(slot);
    }
    if (last_use[leaves + i] < 0) free_slots.push_back(plan.slot.back());  // never read
  }
  return true;
}

// Pulls the lines of [from, from + bytes) towards the core ahead of their use. A piece spreads
// its next pieces' fetches over its steps (a share before each): issued all at once, they
// outnumber the core's outstanding misses and stall it until memory answers, where spread out
// they overlap the steps' arithmetic (chain8 4096², 2 threads: 6.45 -> 5.5 ms in a model of
// this loop). Into L2, not L1 (_MM_HINT_T2): the piece's own reads then find their lines one
// level up, but the fetches no longer compete with them for the L1's miss slots (fma_exp 4096²
// fused, 2 threads, two libraries interleaved over four rounds: 13-18% faster in each, 7.2-9.1
// ms against 8.6-10.4 with _MM_HINT_T0; chain8 within noise; no fetch at all 35% slower).
void fetch_ahead(const std::byte* from, std::int64_t bytes) {
#if defined(__SSE__)
  for (std::int64_t at = 0; at < bytes; at += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(from + at), _MM_HINT_T2);
  }
#else
  (void)from, (void)bytes;
#endif
}

std::vector<Primitive> run_pieces(const FusedProgram& program, const PiecePlan& plan) {
  const std::int64_t positions = program.shape.num_elements();
  const std::size_t leaves = program.leaves.size();
  std::vector<std::shared_ptr<CpuTensor>> outputs;
  std::int64_t output_bytes = 0;
  // An output takes the memory of a leaf nobody else can see (a product's result that
  // run_heads_first made) when that leaf is read whole, of the output's dtype and shape: a piece
  // reads its positions' inputs before it writes there, as the eager ops reuse a temporary.
  // First, the leaves the caller lets outputs be written into (FusedProgram::write_into).
  std::vector<bool> taken(leaves, false);
  std::vector<std::int32_t> into(program.write_into.size());  // empty (no allocation): none
  for (std::size_t k = 0; k < into.size(); ++k) {
    into[k] = CpuBackend::writable_leaf(program, k);
    if (into[k] >= 0) taken[static_cast<std::size_t>(into[k])] = true;
  }
  for (std::size_t k = 0; k < program.outputs.size(); ++k) {
    const FusedStep& step = program.steps[static_cast<std::size_t>(program.outputs[k])];
    std::shared_ptr<CpuTensor> memory;
    if (k < into.size() && into[k] >= 0) {
      memory =
          std::static_pointer_cast<CpuTensor>(program.leaves[static_cast<std::size_t>(into[k])]);
    }
    for (std::size_t v = 0; v < leaves && memory == nullptr; ++v) {
      const Primitive& leaf = program.leaves[v];
      if (!taken[v] && plan.leaf_read[v] == LeafRead::All && can_mut(leaf) &&
          leaf->dtype() == step.dtype && leaf->shape() == step.shape) {
        taken[v] = true;
        memory = std::static_pointer_cast<CpuTensor>(leaf);
      }
    }
    outputs.push_back(memory ? std::move(memory) : make_tensor(step.dtype, step.shape));
    output_bytes += positions * static_cast<std::int64_t>(dtype_size(step.dtype));
  }
  // Outputs larger than the caches bypass them (stream_store.h): nothing reads them soon.
  const bool stream = output_bytes >= kStreamOutputBytes;
  // Pieces along each row (the last one of a row shorter).
  const std::int64_t piece_length =
      positions < kStreamingPositions ? kCachedPieceElements : kPieceElements;
  const std::int64_t slot_bytes = piece_length * 8;  // a piece of the widest dtype
  const std::int64_t row_length = plan.row_length;
  const std::int64_t per_row = (row_length + piece_length - 1) / piece_length;
  const std::int64_t pieces = positions / row_length * per_row;
  // A thread's share is at least what the eager ops would give one thread, a few steps counted
  // as more work per element: a parallel region costs microseconds, and much more when the
  // cores are shared, so a long group over a small tensor stays on one thread, as its ops would.
  const auto work = static_cast<std::int64_t>(std::min<std::size_t>(program.steps.size(), 4));
  const std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / (piece_length * work));
  parallel_for(pieces, grain, [&](std::int64_t first, std::int64_t last) {
    const std::shared_ptr<CpuTensor> scratch =
        make_tensor(DType::U8, Shape{plan.slots * slot_bytes});
    std::vector<std::byte*> buffers;  // each step's
    for (std::int32_t slot : plan.slot) buffers.push_back(scratch->data() + slot * slot_bytes);
    // Each step's call with everything but the leaves' pointers filled in once: a piece then
    // only points the leaf operands at itself (chain8 makes half a million calls a run).
    struct Call {
      const Kernel* kernel;
      const FusedStep* random;  // a random step: its values drawn at the piece's positions
      std::array<char*, 4> data;
      std::array<std::int64_t, 4> strides;
      std::array<std::int32_t, 3> leaf;  // operand k + 1 reads this leaf, or -1
    };
    std::vector<Call> calls(program.steps.size());
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const FusedStep& step = program.steps[i];
      const OwnedKernel& kernel = plan.kernels[i];
      Call& call = calls[i];
      call.kernel = &kernel.kernel();
      call.random = step.op == OpCode::random ? &step : nullptr;
      call.data = {reinterpret_cast<char*>(buffers[i])};
      call.strides = {plan.value_bytes[leaves + i]};
      call.leaf = {-1, -1, -1};
      for (std::uint8_t k = 0; k < step.arity; ++k) {
        const auto v = static_cast<std::size_t>(step.inputs[k]);
        if (v < leaves) {
          call.leaf[k] = static_cast<std::int32_t>(v);
          const LeafRead read = plan.leaf_read[v];
          const CpuTensor& t = *plan.leaf_tensor[v];
          call.strides[k + 1u] =
              read == LeafRead::All || read == LeafRead::Column ? plan.value_bytes[v]
              : read == LeafRead::Strided ? t.strides()[t.rank() - 1] * plan.value_bytes[v]
                                          : 0;
        } else {
          call.data[k + 1u] = reinterpret_cast<char*>(buffers[v - leaves]);
          call.strides[k + 1u] = plan.value_bytes[v];
        }
      }
      if (const void* scalar = kernel.scalar()) {
        call.data[step.arity + 1u] = const_cast<char*>(static_cast<const char*>(scalar));
        call.strides[step.arity + 1u] = 0;
      }
    }
    std::vector<char*> leaf_at(leaves);  // each leaf's first element in the piece
    std::vector<const std::byte*> fetch_at(leaves, nullptr);  // lines to fetch for a later piece
    // Where step c's share of leaf l's lines starts: [l * (steps + 1) + c], in bytes.
    std::vector<std::int64_t> fetch_share(leaves * (calls.size() + 1));
    for (std::size_t l = 0; l < leaves; ++l) {
      const std::int64_t bytes = piece_length * plan.value_bytes[l];
      for (std::size_t c = 0; c <= calls.size(); ++c) {
        fetch_share[l * (calls.size() + 1) + c] = bytes * static_cast<std::int64_t>(c) /
                                                  static_cast<std::int64_t>(calls.size()) / 64 * 64;
      }
    }
    // The piece's row and its first column, stepped along (two divisions a piece were a tenth
    // of chain8's per-piece overhead).
    std::int64_t row = first / per_row, column = first % per_row * piece_length;
    for (std::int64_t piece = first; piece < last; ++piece,
                      column = column + piece_length < row_length ? column + piece_length : 0,
                      row += column == 0 ? 1 : 0) {
      const std::int64_t begin = row * row_length + column;
      const std::int64_t n = std::min(piece_length, row_length - column);
      for (std::size_t l = 0; l < leaves; ++l) {
        const std::int64_t size = plan.value_bytes[l];
        const std::byte* base = plan.leaf_data[l];
        std::int64_t index = 0;
        switch (plan.leaf_read[l]) {
          case LeafRead::All:
            index = begin;
            // What the piece after next reads (the other leaves are small), fetched below.
            fetch_at[l] = piece + kFetchAhead < last
                              ? base + (begin + kFetchAhead * piece_length) * size
                              : nullptr;
            break;
          case LeafRead::Column:
            index = column;
            break;
          case LeafRead::Row:
            index = row;
            break;
          case LeafRead::One:
            break;
          case LeafRead::Strided: {
            // The row's coordinates in the leading dims, through the leaf's strides.
            const CpuTensor& t = *plan.leaf_tensor[l];
            std::int64_t rest = row;
            for (std::size_t d = t.rank() - 1; d-- > 0;) {
              index += rest % t.shape()[d] * t.strides()[d];
              rest /= t.shape()[d];
            }
            index += column * t.strides()[t.rank() - 1];
            break;
          }
        }
        leaf_at[l] = const_cast<char*>(reinterpret_cast<const char*>(base + index * size));
      }
      for (std::size_t c = 0; c < calls.size(); ++c) {
        Call& call = calls[c];
        for (std::size_t l = 0; l < leaves; ++l) {
          if (fetch_at[l] == nullptr) continue;
          const std::int64_t* share = &fetch_share[l * (calls.size() + 1) + c];
          fetch_ahead(fetch_at[l] + share[0], share[1] - share[0]);
        }
        if (call.random != nullptr) {
          const StepParams& p = call.random->params;
          draw_random(reinterpret_cast<std::byte*>(call.data[0]), call.random->dtype,
                      p.distribution, p.stream, begin, n);
          continue;
        }
        for (std::size_t k = 0; k < 3; ++k) {
          if (call.leaf[k] >= 0) call.data[k + 1] = leaf_at[static_cast<std::size_t>(call.leaf[k])];
        }
        call.kernel->loop(n, call.data.data(), call.strides.data(), call.kernel->context);
      }
      for (std::size_t k = 0; k < outputs.size(); ++k) {
        const auto step = static_cast<std::size_t>(program.outputs[k]);
        const std::int64_t size = plan.value_bytes[leaves + step];
        std::byte* to = outputs[k]->data() + begin * size;
        if (stream) {
          stream_bytes_unfenced(to, buffers[step], n * size);
        } else {
          std::memcpy(to, buffers[step], static_cast<std::size_t>(n * size));
        }
      }
    }
    if (stream) stream_fence();
  });
  return {outputs.begin(), outputs.end()};
}

// ---- a weight's update in its gradient's product ----
//
// A group that is a matrix product, its scale and its sum with a leaf that the group's result may
// be written into (FusedProgram::write_into: an optimizer's w.assign(w - xᵀ·dy * lr)) is one
// BLAS call, c = alpha · a·b + beta · c with c that leaf: the product is never written out and
// read back, and the update is no pass of its own. Not where an operand of the product lies on
// the leaf's storage (BLAS reads it while it writes c). Returns the group's output, or nothing.
std::optional<Primitive> run_update_in_product(const FusedProgram& program) {
  const FusedStep& product = program.steps.front();
  const DType dtype = product.dtype;
  const std::int32_t leaves = program.leaf_count();
  if (product.op != OpCode::matmul || product.arity != 2 || product.shape.rank() != 2 ||
      (dtype != DType::F32 && dtype != DType::F64) || program.outputs.size() != 1 ||
      program.write_into.empty() || product.inputs[0] >= leaves || product.inputs[1] >= leaves) {
    return std::nullopt;
  }
  const std::int32_t into = CpuBackend::writable_leaf(program, 0);
  if (into < 0) return std::nullopt;
  const ProductSumSteps sum = product_sum_after(program, 0, last_uses(program));
  if (sum.end != program.steps.size() || sum.addend != into ||
      program.outputs[0] != static_cast<std::int32_t>(sum.end - 1)) {
    return std::nullopt;
  }
  const CpuTensor& a = as_cpu(program.leaves[static_cast<std::size_t>(product.inputs[0])]);
  const CpuTensor& b = as_cpu(program.leaves[static_cast<std::size_t>(product.inputs[1])]);
  const Primitive& out = program.leaves[static_cast<std::size_t>(into)];
  CpuTensor& c = as_cpu(out);
  if (a.dtype() != dtype || b.dtype() != dtype || a.rank() != 2 || b.rank() != 2 ||
      a.storage_key() == c.storage_key() || b.storage_key() == c.storage_key() ||
      c.shape()[1] > (std::int64_t{1} << 30)) {
    return std::nullopt;
  }
  const double alpha = sum.alpha(program), beta = sum.beta();
  // A zero scale: BLAS would skip the product, and with it the NaN an infinite term makes.
  if (alpha == 0.0) return std::nullopt;
  const std::int64_t m = c.shape()[0], n = c.shape()[1];  // c is dense (writable_leaf)
  if (dtype == DType::F32) {
    gemm<float>(matrix_at<float>(a), matrix_at<float>(b), {c.data_as<float>(), m, n, n, 1},
                static_cast<float>(alpha), static_cast<float>(beta));
  } else {
    gemm<double>(matrix_at<double>(a), matrix_at<double>(b), {c.data_as<double>(), m, n, n, 1},
                 alpha, beta);
  }
  return out;
}

}  // namespace

std::vector<Primitive> CpuBackend::run_fused(const FusedProgram& program) {
  // A product runs whole (OpenBLAS), the steps after it on pieces of its result.
  if (has_head(program)) {
    if (std::optional<Primitive> updated = run_update_in_product(program)) return {*updated};
    return run_heads_first(*this, program, [](Backend& self, const FusedProgram& rest) {
      return self.run_fused(rest);
    });
  }
  if (program.steps.size() >= 2) {
    PiecePlan plan;
    if (plan_pieces(program, plan)) {
      std::vector<Primitive> outputs = run_pieces(program, plan);
      for (std::size_t i = 0; i < program.steps.size(); ++i) {
        // An integer op's error (division by zero): step by step, the op says which.
        if (plan.kernels[i].flagged()) return run_steps(*this, program);
      }
      return outputs;
    }
  }
  const Tiling tiling = plan_tiles(program);
  if (tiling.tiles == 0) return run_steps(*this, program);
  const std::vector<std::int32_t> last_use = last_uses(program);
  const std::size_t rank = program.shape.rank();
  const std::size_t leaves = program.leaves.size();
  std::vector<Primitive> outputs;
  outputs.reserve(program.outputs.size());
  for (std::size_t k = 0; k < program.outputs.size(); ++k) {
    // Each tile reads its leaves' elements before it writes its outputs'
    // (FusedProgram::write_into).
    const std::int32_t into = writable_leaf(program, k);
    const FusedStep& step = program.steps[static_cast<std::size_t>(program.outputs[k])];
    outputs.push_back(into >= 0 ? program.leaves[static_cast<std::size_t>(into)]
                                : make_tensor(step.dtype, step.shape));
  }
  parallel_for(tiling.tiles, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<Primitive> values;
    for (std::int64_t index = begin; index < end; ++index) {
      const Box box = box_of(tiling, program.shape, index);
      values.clear();
      for (const Primitive& leaf : program.leaves) {
        values.push_back(tile_view(as_cpu(leaf), tiling, box, rank));
      }
      values.resize(leaves + program.steps.size());
      for (std::size_t i = 0; i < program.steps.size(); ++i) {
        const FusedStep& step = program.steps[i];
        if (step.op == OpCode::random) {
          values[leaves + i] = random_tile(step, tiling, box);
        } else {
          run_step(*this, program, i, last_use, values);
        }
      }
      for (std::size_t k = 0; k < outputs.size(); ++k) {
        const Primitive piece = tile_view(as_cpu(outputs[k]), tiling, box, rank);
        const auto at = leaves + static_cast<std::size_t>(program.outputs[k]);
        write_out(values[at], piece);
      }
    }
  });
  return outputs;
}

}  // namespace kiln
