// Row scans as three block-level passes (CUB block primitives): each chunk of a row (a few
// tiles) reduces to a partial, one block per row scans those partials, and each chunk scans its
// tiles from its prefix. Rows that take one chunk run the last pass only. Included by
// scan_sum_prod.cu and scan_min_max.cu, which instantiate it for their ops (two files: nvcc runs
// them in parallel).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cub/block/block_load.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>
#include <limits>
#include <type_traits>

#include "backends/cuda/check.h"
#include "backends/cuda/lib/scan.h"
#include "backends/cuda/lib/workspace.h"

namespace kiln::cuda::lib::scan_detail {

constexpr int kBlock = 256;

// Elements per thread: 32 bytes of loads for narrow types, at least 4 to amortise the scan.
template <class T>
constexpr int items_per_thread() {
  constexpr int by_bytes = static_cast<int>(32 / sizeof(T));
  return by_bytes < 4 ? 4 : (by_bytes > 16 ? 16 : by_bytes);
}

template <class T>
constexpr std::int64_t tile_size() {
  return std::int64_t{kBlock} * items_per_thread<T>();
}

template <class T>
constexpr bool is_half_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <class T>
constexpr bool is_float_v = is_half_v<T> || std::is_floating_point_v<T>;

// The CPU's compute type: float for the 16-bit floats, the type itself otherwise.
template <class T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;

template <class T>
__device__ compute_t<T> to_compute(T v) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  if constexpr (!is_half_v<T>) return v;
}
template <class T>
__device__ T from_compute(compute_t<T> v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(v);
  if constexpr (!is_half_v<T>) return v;
}

template <class T, ScanOp Op>
struct Traits;

// Sums and products: double for floats, 64-bit wrap-around for integers (cpu_scan.cpp).
template <class T, ScanOp Op>
requires(Op == ScanOp::Sum || Op == ScanOp::Prod) struct Traits<T, Op> {
  using Acc = std::conditional_t<is_float_v<T>, double, std::uint64_t>;
  __device__ static Acc identity() { return Op == ScanOp::Sum ? Acc(0) : Acc(1); }
  __device__ static Acc widen(T v) {
    if constexpr (is_float_v<T>) {
      return static_cast<double>(to_compute(v));
    } else if constexpr (std::is_signed_v<T>) {
      return static_cast<std::uint64_t>(static_cast<std::int64_t>(v));
    } else {
      return static_cast<std::uint64_t>(v);
    }
  }
  __device__ static T narrow(Acc a) {
    if constexpr (is_float_v<T>) {
      return from_compute<T>(static_cast<compute_t<T>>(a));  // double -> compute -> T, as the CPU
    } else {
      return static_cast<T>(a);  // modular
    }
  }
  __device__ Acc operator()(Acc a, Acc b) const { return Op == ScanOp::Sum ? a + b : a * b; }
};

// Extrema in the compute type; a NaN, once seen, stays; ties keep the earlier value.
template <class T, ScanOp Op>
requires(Op == ScanOp::Min || Op == ScanOp::Max) struct Traits<T, Op> {
  using Acc = compute_t<T>;
  static constexpr bool kMax = Op == ScanOp::Max;
  __device__ static Acc identity() {
    if constexpr (is_float_v<T>) {
      return kMax ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::infinity();
    } else {
      return kMax ? std::numeric_limits<Acc>::lowest() : std::numeric_limits<Acc>::max();
    }
  }
  __device__ static Acc widen(T v) { return to_compute(v); }
  __device__ static T narrow(Acc a) { return from_compute<T>(a); }
  // a comes before b in the row.
  __device__ Acc operator()(Acc a, Acc b) const {
    if constexpr (is_float_v<T>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return (kMax ? b > a : b < a) ? b : a;
  }
};

template <class T, ScanOp Op>
struct TileIo {
  using Acc = typename Traits<T, Op>::Acc;
  static constexpr int kItems = items_per_thread<T>();
  using Load = cub::BlockLoad<T, kBlock, kItems, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
  using Store = cub::BlockStore<T, kBlock, kItems, cub::BLOCK_STORE_WARP_TRANSPOSE>;
  using Reduce = cub::BlockReduce<Acc, kBlock>;
  using Scan = cub::BlockScan<Acc, kBlock>;

  // Loads tile t of row r into items (blocked arrangement), identity past the row's end.
  __device__ static void load(typename Load::TempStorage& temp, const T* row, std::int64_t start,
                              int count, Acc (&items)[kItems]) {
    T raw[kItems];
    Load(temp).Load(row + start, raw, count);
    for (int i = 0; i < kItems; ++i) {
      const int at = static_cast<int>(threadIdx.x) * kItems + i;
      items[i] = at < count ? Traits<T, Op>::widen(raw[i]) : Traits<T, Op>::identity();
    }
  }
};

// How a row is cut: tiles (one block-wide load each) grouped into chunks (one block each). A
// block walks its chunk's tiles in order, so a long row needs few partials and the grid stays
// near one wave of blocks; rows that take one chunk need no partials at all.
struct Geometry {
  std::int64_t tiles_per_row = 0;
  std::int64_t tiles_per_chunk = 0;
  std::int64_t chunks_per_row = 0;
};

template <class T>
Geometry geometry(const ScanDesc& desc) {
  constexpr std::int64_t kTargetBlocks = 1024;  // about one wave of 256-thread blocks on an H200
  Geometry g;
  g.tiles_per_row = std::max<std::int64_t>(1, (desc.n + tile_size<T>() - 1) / tile_size<T>());
  const std::int64_t wanted =
      std::max<std::int64_t>(1, kTargetBlocks / std::max<std::int64_t>(1, desc.rows));
  const std::int64_t chunks = std::min(g.tiles_per_row, wanted);
  g.tiles_per_chunk = (g.tiles_per_row + chunks - 1) / chunks;
  g.chunks_per_row = (g.tiles_per_row + g.tiles_per_chunk - 1) / g.tiles_per_chunk;
  return g;
}

// The tiles [first, last) of block `chunk` (numbered over all rows) and its row.
struct ChunkRange {
  std::int64_t row, first, last;
};
__device__ inline ChunkRange chunk_range(const Geometry& g) {
  const std::int64_t chunk = blockIdx.x;
  const std::int64_t row = chunk / g.chunks_per_row;
  const std::int64_t first = (chunk - row * g.chunks_per_row) * g.tiles_per_chunk;
  return {row, first, std::min(first + g.tiles_per_chunk, g.tiles_per_row)};
}

template <class T, ScanOp Op>
__global__ void __launch_bounds__(kBlock)
    reduce_chunks(const T* __restrict__ input, typename Traits<T, Op>::Acc* __restrict__ partials,
                  std::int64_t n, Geometry g) {
  using Io = TileIo<T, Op>;
  __shared__ union {
    typename Io::Load::TempStorage load;
    typename Io::Reduce::TempStorage reduce;
  } temp;
  const Traits<T, Op> op{};
  const ChunkRange range = chunk_range(g);
  auto total = Traits<T, Op>::identity();  // meaningful in thread 0, which receives each reduction
  for (std::int64_t tile = range.first; tile < range.last; ++tile) {
    const std::int64_t start = tile * tile_size<T>();
    const int count = static_cast<int>(std::min<std::int64_t>(tile_size<T>(), n - start));
    typename Io::Acc items[Io::kItems];
    Io::load(temp.load, input + range.row * n, start, count, items);
    __syncthreads();
    const auto reduced = typename Io::Reduce(temp.reduce).Reduce(items, op);
    if (threadIdx.x == 0) total = op(total, reduced);
    __syncthreads();  // temp is reused by the next tile
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// Replaces each row's chunk partials by their exclusive prefix (the identity for the first).
template <class T, ScanOp Op>
__global__ void __launch_bounds__(kBlock)
    scan_partials(typename Traits<T, Op>::Acc* partials, std::int64_t chunks_per_row) {
  using Acc = typename Traits<T, Op>::Acc;
  using Scan = cub::BlockScan<Acc, kBlock>;
  __shared__ typename Scan::TempStorage temp;
  const Traits<T, Op> op{};
  Acc* row = partials + static_cast<std::int64_t>(blockIdx.x) * chunks_per_row;
  Acc carry = Traits<T, Op>::identity();
  for (std::int64_t base = 0; base < chunks_per_row; base += kBlock) {
    const std::int64_t at = base + threadIdx.x;
    const Acc value = at < chunks_per_row ? row[at] : Traits<T, Op>::identity();
    Acc exclusive;
    Acc aggregate;
    Scan(temp).ExclusiveScan(value, exclusive, Traits<T, Op>::identity(), op, aggregate);
    if (at < chunks_per_row) row[at] = op(carry, exclusive);
    carry = op(carry, aggregate);
    __syncthreads();  // temp is reused by the next group
  }
}

// Scans a chunk's tiles in order, starting from the chunk's prefix (the identity without
// partials; op(identity, x) is x, and turns -0.0 into +0.0 in sums exactly as the CPU's 0 + x).
template <class T, ScanOp Op>
__global__ void __launch_bounds__(kBlock)
    scan_chunks(const T* input, T* output, const typename Traits<T, Op>::Acc* __restrict__ prefixes,
                std::int64_t n, Geometry g) {
  using Io = TileIo<T, Op>;
  __shared__ union {
    typename Io::Load::TempStorage load;
    typename Io::Scan::TempStorage scan;
    typename Io::Store::TempStorage store;
  } temp;
  const Traits<T, Op> op{};
  const ChunkRange range = chunk_range(g);
  auto prefix = prefixes != nullptr ? prefixes[blockIdx.x] : Traits<T, Op>::identity();
  for (std::int64_t tile = range.first; tile < range.last; ++tile) {
    const std::int64_t start = tile * tile_size<T>();
    const int count = static_cast<int>(std::min<std::int64_t>(tile_size<T>(), n - start));
    typename Io::Acc items[Io::kItems];
    Io::load(temp.load, input + range.row * n, start, count, items);
    __syncthreads();
    typename Io::Acc aggregate;
    typename Io::Scan(temp.scan).InclusiveScan(items, items, op, aggregate);
    __syncthreads();
    T out[Io::kItems];
    for (int i = 0; i < Io::kItems; ++i) out[i] = Traits<T, Op>::narrow(op(prefix, items[i]));
    typename Io::Store(temp.store).Store(output + range.row * n + start, out, count);
    __syncthreads();  // temp is reused by the next tile
    prefix = op(prefix, aggregate);
  }
}

template <class T, ScanOp Op>
std::size_t workspace_bytes(const ScanDesc& desc) {
  const Geometry g = geometry<T>(desc);
  if (g.chunks_per_row <= 1) return 0;
  return align_up(static_cast<std::size_t>(desc.rows * g.chunks_per_row) *
                  sizeof(typename Traits<T, Op>::Acc));
}

template <class T, ScanOp Op>
void run(const ScanDesc& desc, const void* input, void* output, void* workspace, std::size_t bytes,
         cudaStream_t stream) {
  const Geometry g = geometry<T>(desc);
  const std::int64_t blocks = desc.rows * g.chunks_per_row;
  if (blocks > std::numeric_limits<std::int32_t>::max()) {
    detail::fail<InvalidArgument>("scan", "rows ", desc.rows, " exceed the grid limit");
  }
  const T* in = static_cast<const T*>(input);
  T* out = static_cast<T*>(output);
  using Acc = typename Traits<T, Op>::Acc;
  Acc* partials = nullptr;
  if (g.chunks_per_row > 1) {
    if (workspace == nullptr || bytes < workspace_bytes<T, Op>(desc)) {
      detail::fail<InvalidArgument>("scan", "workspace of ", bytes, " bytes, need ",
                                    workspace_bytes<T, Op>(desc));
    }
    partials = static_cast<Acc*>(workspace);
    reduce_chunks<T, Op>
        <<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(in, partials, desc.n, g);
    KILN_CUDA_CHECK("scan", cudaGetLastError());
    scan_partials<T, Op>
        <<<static_cast<unsigned>(desc.rows), kBlock, 0, stream>>>(partials, g.chunks_per_row);
    KILN_CUDA_CHECK("scan", cudaGetLastError());
  }
  scan_chunks<T, Op>
      <<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(in, out, partials, desc.n, g);
  KILN_CUDA_CHECK("scan", cudaGetLastError());
}

// f(type_tag<T>) with T the CUDA storage type of dtype.
template <class T>
struct Tag {
  using type = T;
};

template <class F>
decltype(auto) visit_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::F64:
      return f(Tag<double>{});
    case DType::F32:
      return f(Tag<float>{});
    case DType::F16:
      return f(Tag<__half>{});
    case DType::BF16:
      return f(Tag<__nv_bfloat16>{});
    case DType::I64:
      return f(Tag<std::int64_t>{});
    case DType::I32:
      return f(Tag<std::int32_t>{});
    case DType::I16:
      return f(Tag<std::int16_t>{});
    case DType::I8:
      return f(Tag<std::int8_t>{});
    case DType::U64:
      return f(Tag<std::uint64_t>{});
    case DType::U32:
      return f(Tag<std::uint32_t>{});
    case DType::U16:
      return f(Tag<std::uint16_t>{});
    case DType::U8:
      return f(Tag<std::uint8_t>{});
    default:
      break;
  }
  detail::fail<UnsupportedDType>("scan", "cannot scan dtype ", dtype_name(dtype));
}

// Defined in scan_sum_prod.cu and scan_min_max.cu.
std::size_t sum_prod_workspace(const ScanDesc& desc);
std::size_t min_max_workspace(const ScanDesc& desc);
void sum_prod(const ScanDesc& desc, const void* input, void* output, void* workspace,
              std::size_t bytes, cudaStream_t stream);
void min_max(const ScanDesc& desc, const void* input, void* output, void* workspace,
             std::size_t bytes, cudaStream_t stream);

}  // namespace kiln::cuda::lib::scan_detail
