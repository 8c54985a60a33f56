// Source generation of the row scans (scan.h): one module per (kernel, op, dtype). The op and
// dtype become four functions (identity, widen, narrow, combine) that the kernels' shared text
// calls; every combination keeps the row's order (combine(a, b) with a before b), so cummin and
// cummax keep the earlier of equal values and the first NaN, and float sums and products are
// combined in an order that depends on the shape only.
#include <fmt/format.h>

#include <string>

#include "backends/cuda/kernel_source.h"
#include "backends/cuda/scan.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::cuda {

using namespace fmt::literals;

namespace {

// The launch parameters (ScanParams in scan.h mirrors it).
constexpr const char* kParams = R"CUDA(
struct P {
  i64 rows, n, chunks, tiles_per_chunk;
  u64 in, out, partials;  // partials: [rows, chunks] accumulators when chunks > 1
};
)CUDA";

// Sub-tiles through shared memory and the ordered warp scan, shared by the kernels. A lane scans
// ITEMS neighbouring elements serially; a sub-tile is a warp's 32 x ITEMS elements.
constexpr const char* kCommon = R"CUDA(
constexpr int kWarp = 32;
constexpr int kBlock = 256;
constexpr int kWarpsPerBlock = kBlock / kWarp;
constexpr unsigned kAllLanes = 0xffffffffu;
constexpr int SUB = kWarp * ITEMS;

// 4 bytes (one element of 8) of padding after every 128 bytes of a sub-tile in shared memory:
// lanes reading their neighbours (element lane * ITEMS + k) then hit 32 distinct banks, as do
// lanes reading in coalesced order (element k * 32 + lane).
constexpr int kRun = 128 / (int)sizeof(S);
constexpr int kPad = sizeof(S) < 4 ? 4 / (int)sizeof(S) : 1;
constexpr int SLOTS = SUB + SUB / kRun * kPad;
__device__ __forceinline__ int slot(int q) { return q + q / kRun * kPad; }

// Lane `lane` takes elements [lane * ITEMS, lane * ITEMS + ITEMS) of the sub-tile at `from`, of
// which `count` are in the row (the identity stands for the rest), read in coalesced order.
__device__ __forceinline__ void load_items(S* tile, const S* from, int count, int lane,
                                           A (&items)[ITEMS]) {
  __syncwarp();  // every lane is done with the tile's previous contents
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int q = k * kWarp + lane;
    if (q < count) tile[slot(q)] = from[q];
  }
  __syncwarp();
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int q = lane * ITEMS + k;
    items[k] = q < count ? widen(tile[slot(q)]) : identity();
  }
}

// The way back: each lane's values narrowed into its own slots, written out in coalesced order.
__device__ __forceinline__ void store_items(S* tile, S* to, int count, int lane,
                                            const A (&values)[ITEMS]) {
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int q = lane * ITEMS + k;
    if (q < count) tile[slot(q)] = narrow(values[k]);
  }
  __syncwarp();
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int q = k * kWarp + lane;
    if (q < count) to[q] = tile[slot(q)];
  }
}

__device__ __forceinline__ A thread_total(const A (&items)[ITEMS]) {
  A total = items[0];
#pragma unroll
  for (int k = 1; k < ITEMS; ++k) total = combine(total, items[k]);
  return total;
}

// Inclusive scan over the lanes: each step puts the run before a lane's run in front of it, so
// values combine in lane order.
__device__ __forceinline__ A warp_inclusive(A v, int lane) {
#pragma unroll
  for (int d = 1; d < kWarp; d *= 2) {
    const A before = __shfl_up_sync(kAllLanes, v, d);
    if (lane >= d) v = combine(before, v);
  }
  return v;
}

// items become their inclusive scan, continuing from prefix.
__device__ __forceinline__ void scan_items(A (&items)[ITEMS], A prefix) {
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    prefix = combine(prefix, items[k]);
    items[k] = prefix;
  }
}
)CUDA";

// Rows of at most kScanThreadRowMax elements: a thread each, left to right (in place too: each
// element is read before it is written).
constexpr const char* kRowsThread = R"CUDA(
extern "C" __global__ void __launch_bounds__(256) kiln_scan_rows_thread(const P p) {
  const i64 stride = (i64)gridDim.x * blockDim.x;
  for (i64 row = blockIdx.x * (i64)blockDim.x + threadIdx.x; row < p.rows; row += stride) {
    const S* in = (const S*)p.in + row * p.n;
    S* out = (S*)p.out + row * p.n;
    A running = identity();
    for (i64 j = 0; j < p.n; ++j) {
      running = combine(running, widen(in[j]));
      out[j] = narrow(running);
    }
  }
}
)CUDA";

// A warp per row, its sub-tiles in order; carry is the combination of the row before the
// sub-tile (the identity first, so sums of -0.0 give +0.0 as the CPU's 0 + x does).
constexpr const char* kRowsWarp = R"CUDA(
__shared__ S warp_tiles[kWarpsPerBlock][SLOTS];

extern "C" __global__ void __launch_bounds__(256) kiln_scan_rows_warp(const P p) {
  const int lane = (int)threadIdx.x % kWarp, warp = (int)threadIdx.x / kWarp;
  S* tile = warp_tiles[warp];
  // Whole warps take the same rows, so every shuffle has all 32 lanes.
  const i64 stride = (i64)gridDim.x * kWarpsPerBlock;
  for (i64 row = blockIdx.x * (i64)kWarpsPerBlock + warp; row < p.rows; row += stride) {
    const S* in = (const S*)p.in + row * p.n;
    S* out = (S*)p.out + row * p.n;
    A carry = identity();
    for (i64 start = 0; start < p.n; start += SUB) {
      const int count = p.n - start < SUB ? (int)(p.n - start) : SUB;
      A items[ITEMS];
      load_items(tile, in + start, count, lane, items);
      const A inclusive = warp_inclusive(thread_total(items), lane);
      const A before = __shfl_up_sync(kAllLanes, inclusive, 1);
      scan_items(items, lane == 0 ? carry : combine(carry, before));
      carry = combine(carry, __shfl_sync(kAllLanes, inclusive, kWarp - 1));
      store_items(tile, out + start, count, lane, items);
    }
  }
}
)CUDA";

// A block per chunk of a row (tiles_per_chunk tiles, a tile being the block's eight sub-tiles
// side by side): the warps scan their sub-tiles, and warp w continues from the totals of the
// warps before it, which every thread combines in the same order. ChunkTotals only combines;
// Chunks starts each chunk from the chunks before it.
constexpr const char* kChunkWalk = R"CUDA(
constexpr i64 TILE = (i64)kBlock * ITEMS;
__shared__ S block_tiles[kWarpsPerBlock][SLOTS];
__shared__ A warp_totals[kWarpsPerBlock];

// value followed by the totals of the first `warps` warps.
__device__ __forceinline__ A after_warps(A value, int warps) {
  for (int w = 0; w < warps; ++w) value = combine(value, warp_totals[w]);
  return value;
}

// The chunk's tiles in order, scanned from carry (SCAN) or only combined into it; returns the
// carry after the chunk (every thread the same bits).
template <bool SCAN>
__device__ __forceinline__ A walk_chunk(const P& p, i64 row, i64 chunk, A carry, int lane,
                                        int warp) {
  S* tile = block_tiles[warp];
  const S* in = (const S*)p.in + row * p.n;
  S* out = (S*)p.out + row * p.n;
  const i64 first = chunk * p.tiles_per_chunk * TILE;
  const i64 end = first + p.tiles_per_chunk * TILE;
  const i64 last = end < p.n ? end : p.n;
  for (i64 start = first; start < last; start += TILE) {
    // Chunks end on tile boundaries: only the row's end cuts a sub-tile short.
    const i64 at = start + (i64)warp * SUB;
    const i64 left = p.n - at;
    const int count = left <= 0 ? 0 : (left < SUB ? (int)left : SUB);
    A items[ITEMS];
    load_items(tile, in + at, count, lane, items);
    const A inclusive = warp_inclusive(thread_total(items), lane);
    if (lane == kWarp - 1) warp_totals[warp] = inclusive;
    __syncthreads();
    if (SCAN) {
      const A before = __shfl_up_sync(kAllLanes, inclusive, 1);
      const A prefix = after_warps(carry, warp);
      scan_items(items, lane == 0 ? prefix : combine(prefix, before));
      store_items(tile, out + at, count, lane, items);
    }
    carry = after_warps(carry, kWarpsPerBlock);
    __syncthreads();  // warp_totals is rewritten by the next tile
  }
  return carry;
}
)CUDA";

constexpr const char* kChunkTotals = R"CUDA(
extern "C" __global__ void __launch_bounds__(256) kiln_scan_chunk_totals(const P p) {
  const int lane = (int)threadIdx.x % kWarp, warp = (int)threadIdx.x / kWarp;
  for (i64 unit = blockIdx.x; unit < p.rows * p.chunks; unit += gridDim.x) {
    const i64 row = unit / p.chunks;
    const A total = walk_chunk<false>(p, row, unit - row * p.chunks, identity(), lane, warp);
    if (threadIdx.x == 0) ((A*)p.partials)[unit] = total;
  }
}
)CUDA";

// Each chunk combines the totals of the chunks before it (a run per thread, the runs in thread
// order), then scans its tiles from there.
constexpr const char* kChunks = R"CUDA(
__device__ __forceinline__ A chunks_before(const P& p, i64 row, i64 chunk, int lane, int warp) {
  const A* partials = (const A*)p.partials + row * p.chunks;
  const i64 per = (chunk + kBlock - 1) / kBlock;
  const i64 first = (i64)threadIdx.x * per;
  const i64 last = first + per < chunk ? first + per : chunk;
  A run = identity();
  for (i64 c = first; c < last; ++c) run = combine(run, partials[c]);
  const A inclusive = warp_inclusive(run, lane);
  if (lane == kWarp - 1) warp_totals[warp] = inclusive;
  __syncthreads();
  const A total = after_warps(identity(), kWarpsPerBlock);
  __syncthreads();  // warp_totals is rewritten by the first tile
  return total;
}

extern "C" __global__ void __launch_bounds__(256) kiln_scan_chunks(const P p) {
  const int lane = (int)threadIdx.x % kWarp, warp = (int)threadIdx.x / kWarp;
  for (i64 unit = blockIdx.x; unit < p.rows * p.chunks; unit += gridDim.x) {
    const i64 row = unit / p.chunks, chunk = unit - row * p.chunks;
    const A carry = chunk == 0 ? identity() : chunks_before(p, row, chunk, lane, warp);
    walk_chunk<true>(p, row, chunk, carry, lane, warp);
  }
}
)CUDA";

bool sum_or_prod(ScanOp op) { return op == ScanOp::Sum || op == ScanOp::Prod; }

// Wrapping integer sums and products modulo 2^width do not depend on the sign (nor on the
// 64-bit accumulator the CPU uses: reducing mod 2^width commutes with + and *), so each width
// has one kernel, on its unsigned dtype.
DType kernel_dtype(ScanOp op, DType dtype) {
  if (!sum_or_prod(op) || !is_int(dtype)) return dtype;
  switch (dtype_size(dtype)) {
    case 8:
      return DType::U64;
    case 4:
      return DType::U32;
    case 2:
      return DType::U16;
    default:
      return DType::U8;
  }
}

// The bits of dtype's largest (or lowest) value, as a literal of S converted to A.
std::string integer_limit(DType dtype, bool largest) {
  const int bits = static_cast<int>(8 * dtype_size(dtype));
  const unsigned long long all = bits == 64 ? ~0ull : (1ull << bits) - 1;
  unsigned long long value = 0;
  if (is_signed_int(dtype)) {
    value = largest ? all >> 1 : 1ull << (bits - 1);
  } else {
    value = largest ? all : 0;
  }
  return fmt::format("(A)(S)0x{:x}ull", value);
}

std::string infinity(DType dtype, bool negative) {
  if (dtype == DType::F64) {
    return negative ? "__longlong_as_double(0xfff0000000000000ll)"
                    : "__longlong_as_double(0x7ff0000000000000ll)";
  }
  return negative ? "__int_as_float((int)0xff800000u)" : "__int_as_float(0x7f800000)";
}

struct Operation {
  std::string accumulator, identity, widen, narrow, combine;
};

// cpu_scan.cpp's SumScan, ProdScan and ExtremumScan as device functions.
Operation operation(ScanOp op, DType dtype) {
  const std::string compute = compute_type(dtype);
  Operation o;
  if (sum_or_prod(op)) {
    const bool sum = op == ScanOp::Sum;
    if (is_float(dtype)) {
      o.accumulator = "double";
      o.widen = fmt::format("(double){}", load_expression(dtype, "v"));
      // double -> compute -> dtype
      o.narrow = store_expression(dtype, fmt::format("({})a", compute));
    } else {
      o.accumulator = dtype_size(dtype) == 8 ? "u64" : "unsigned";
      o.widen = "(A)v";
      o.narrow = "(S)a";
    }
    o.identity = sum ? "(A)0" : "(A)1";
    o.combine = sum ? "return a + b;" : "return a * b;";
    return o;
  }
  const bool largest = op == ScanOp::Max;
  const char* better = largest ? "b > a" : "b < a";  // ties keep a, the earlier
  if (is_float(dtype)) {
    o.accumulator = compute;
    o.identity = infinity(dtype, largest);
    o.widen = load_expression(dtype, "v");
    o.narrow = store_expression(dtype, "a");
    o.combine =
        fmt::format("if (a != a) return a; if (b != b) return b; return {} ? b : a;", better);
  } else {
    // Narrow integers widen to int: shuffles move 32-bit words.
    o.accumulator = dtype_size(dtype) >= 4 ? storage_type(dtype) : "int";
    o.identity = integer_limit(dtype, !largest);
    o.widen = "(A)v";
    o.narrow = "(S)a";
    o.combine = fmt::format("return {} ? b : a;", better);
  }
  return o;
}

const char* kernel_label(ScanKernel kernel) {
  switch (kernel) {
    case ScanKernel::RowsThread:
      return "rows_thread";
    case ScanKernel::RowsWarp:
      return "rows_warp";
    case ScanKernel::Chunks:
      return "chunks";
    case ScanKernel::ChunkTotals:
      return "chunk_totals";
  }
  return "?";
}

}  // namespace

const char* scan_kernel_name(ScanKernel kernel) {
  switch (kernel) {
    case ScanKernel::RowsThread:
      return "kiln_scan_rows_thread";
    case ScanKernel::RowsWarp:
      return "kiln_scan_rows_warp";
    case ScanKernel::Chunks:
      return "kiln_scan_chunks";
    case ScanKernel::ChunkTotals:
      return "kiln_scan_chunk_totals";
  }
  return "?";
}

std::string scan_kernel_key(ScanKernel kernel, ScanOp op, DType dtype) {
  validate(ScanDesc{.dtype = dtype, .rows = 0, .n = 0, .op = op});
  return detail::concat("scan:", kernel_label(kernel), ":", scan_op_name(op), ":",
                        short_name(kernel_dtype(op, dtype)));
}

std::string scan_kernel_source(ScanKernel kernel, ScanOp op, DType dtype) {
  validate(ScanDesc{.dtype = dtype, .rows = 0, .n = 0, .op = op});
  const DType d = kernel_dtype(op, dtype);
  const Operation o = operation(op, d);
  const std::string head =
      fmt::format(R"CUDA({prelude}{params}typedef {S} S;
typedef {A} A;
__device__ __forceinline__ A identity() {{ return {identity}; }}
__device__ __forceinline__ A widen(S v) {{ return {widen}; }}
__device__ __forceinline__ S narrow(A a) {{ return {narrow}; }}
// a comes before b in the row.
__device__ __forceinline__ A combine(A a, A b) {{ {combine} }}
)CUDA",
                  "prelude"_a = kernel_prelude(), "params"_a = kParams, "S"_a = storage_type(d),
                  "A"_a = o.accumulator, "identity"_a = o.identity, "widen"_a = o.widen,
                  "narrow"_a = o.narrow, "combine"_a = o.combine);
  // The kernels that scan tiles of ITEMS per lane share kCommon; the thread per row does not.
  const std::string tiles =
      fmt::format("constexpr int ITEMS = {};\n{}", scan_items_per_thread(d), kCommon);
  switch (kernel) {
    case ScanKernel::RowsThread:
      return fmt::format("{}{}", head, kRowsThread);
    case ScanKernel::RowsWarp:
      return fmt::format("{}{}{}", head, tiles, kRowsWarp);
    case ScanKernel::Chunks:
      return fmt::format("{}{}{}{}", head, tiles, kChunkWalk, kChunks);
    case ScanKernel::ChunkTotals:
      return fmt::format("{}{}{}{}", head, tiles, kChunkWalk, kChunkTotals);
  }
  detail::fail<InvalidArgument>("scan", "unknown scan kernel ", static_cast<int>(kernel));
}

}  // namespace kiln::cuda
