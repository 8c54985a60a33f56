// The selection topk's kernels (topk.h has the plan; topk_select.h the register lists).
//   select_rows:    a warp per (row, segment). Lanes read the segment with 16-byte loads (the
//                   unaligned head and the tail element by element), each keeping its best K in
//                   registers. After each round of loads the warp shares a threshold, the best
//                   K-th key of any lane: an element below it has K better ones in one lane
//                   alone, so it is rejected with one compare (after the first rounds, nearly
//                   every element). The lanes' lists merge by shuffles; the warp writes the row's
//                   k results, or its segment's list of K.
//   merge_segments: a block per row of a segmented plan: threads merge the segments' lists in
//                   registers, warps by shuffles, the block's eight through shared memory.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cuda/lib/key_codec.cuh"
#include "backends/cuda/lib/topk_select.h"

namespace kiln::cuda::lib::topk_detail {

inline constexpr int kWarp = 32;
inline constexpr int kBlock = 256;
inline constexpr int kWarpsPerBlock = kBlock / kWarp;
inline constexpr int kLoads = 4;  // 16-byte loads in flight per lane
inline constexpr unsigned kAllLanes = 0xffffffffu;

static_assert(sizeof(Candidate<std::uint32_t>) == 8 && sizeof(Candidate<std::uint64_t>) == 16,
              "candidate_bytes (topk_detail.h) assumes these sizes");

struct SelectArgs {
  std::int64_t rows, n, segments, segment, k;
  bool largest;
  bool wide_indices;  // i64 indices, else i32
  void* values;       // [rows, k] when segments == 1
  void* indices;
  void* partial;  // [rows, segments, K] lists when segments > 1
};

struct MergeArgs {
  std::int64_t rows, n, segments, k;
  bool wide_indices;
  void* values;
  void* indices;
  const void* partial;
};

template <class U>
__device__ __forceinline__ Candidate<U> shuffle_xor(const Candidate<U>& c, int mask) {
  if constexpr (sizeof(U) == 8) {
    return {__shfl_xor_sync(kAllLanes, c.key_bits, mask), __shfl_xor_sync(kAllLanes, c.rank, mask)};
  } else {
    return {__shfl_xor_sync(kAllLanes, c.word, mask)};
  }
}

// Every lane's list becomes the K best of the warp's lists (all lanes converged). Each step
// exchanges two entries with the partner lane, read before either side changes them.
template <int K, class C>
__device__ __forceinline__ void warp_merge(C (&list)[K]) {
#pragma unroll
  for (int mask = kWarp / 2; mask > 0; mask /= 2) {
#pragma unroll
    for (int i = 0; i < (K + 1) / 2; ++i) {
      const C high = shuffle_xor(list[K - 1 - i], mask);
      const C low = shuffle_xor(list[i], mask);
      if (high.before(list[i])) list[i] = high;
      if (low.before(list[K - 1 - i])) list[K - 1 - i] = low;
    }
    sort_bitonic(list);
  }
}

// The largest of the lanes' keys.
template <class U>
__device__ __forceinline__ U warp_max(U key) {
  using W = std::conditional_t<(sizeof(U) < 4), std::uint32_t, U>;
  W value = key;
#pragma unroll
  for (int mask = kWarp / 2; mask > 0; mask /= 2) {
    const W other = __shfl_xor_sync(kAllLanes, value, mask);
    value = other > value ? other : value;
  }
  return static_cast<U>(value);
}

// Element `bits` at `position` offered to the lane's list.
template <class U, KeyKind Kind, int K>
__device__ __forceinline__ void offer(Candidate<U> (&list)[K], U threshold, bool descending, U bits,
                                      std::int64_t position) {
  const U key = KeyCodec<U, Kind>::encode(bits, descending);
  if (key < threshold) return;
  const Candidate<U> c = Candidate<U>::of(key, static_cast<std::uint32_t>(position));
  if (c.before(list[K - 1])) insert(list, c);
}

// Lane j < k writes result j of the row: the input's own bits at the entry's position, and the
// position.
template <class U, int K>
__device__ __forceinline__ void write_results(const Candidate<U> (&list)[K], const U* row_input,
                                              std::int64_t row, std::int64_t k, bool wide_indices,
                                              void* values, void* indices, int lane) {
#pragma unroll
  for (int j = 0; j < K; ++j) {
    if (j == lane && j < k) {
      const std::uint32_t position = list[j].position();
      const std::int64_t at = row * k + j;
      static_cast<U*>(values)[at] = row_input[position];
      if (wide_indices) {
        static_cast<std::int64_t*>(indices)[at] = position;
      } else {
        static_cast<std::int32_t*>(indices)[at] = static_cast<std::int32_t>(position);
      }
    }
  }
}

template <class U, KeyKind Kind, int K>
__global__ void __launch_bounds__(kBlock) select_rows(const U* __restrict__ input, SelectArgs a) {
  using C = Candidate<U>;
  constexpr int V = 16 / sizeof(U);  // elements per 16-byte load
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const bool descending = !a.largest;  // smallest first: complemented keys, best is largest
  const std::int64_t units = a.rows * a.segments;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock;
  // Whole warps take the same units, so every shuffle below has all 32 lanes.
  for (std::int64_t unit = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock +
                           static_cast<std::int64_t>(threadIdx.x) / kWarp;
       unit < units; unit += stride) {
    const std::int64_t row = unit / a.segments;
    const std::int64_t begin = (unit - row * a.segments) * a.segment;
    const std::int64_t end = begin + a.segment < a.n ? begin + a.segment : a.n;
    const U* p = input + row * a.n;
    C list[K];
#pragma unroll
    for (int i = 0; i < K; ++i) list[i] = C::none();
    U threshold = 0;

    // Element by element up to the first 16-byte boundary.
    const auto address = reinterpret_cast<std::uintptr_t>(p + begin);
    std::int64_t head = static_cast<std::int64_t>(((16 - address % 16) % 16) / sizeof(U));
    if (head > end - begin) head = end - begin;
    for (std::int64_t j = begin + lane; j < begin + head; j += kWarp) {
      offer<U, Kind, K>(list, threshold, descending, p[j], j);
    }
    // 16-byte loads, kLoads per lane in flight; the threshold refreshed after each round.
    const std::int64_t start = begin + head;
    const std::int64_t vectors = (end - start) / V;
    const uint4* vp = reinterpret_cast<const uint4*>(p + start);
    for (std::int64_t round = 0; round < vectors; round += kLoads * kWarp) {
      uint4 words[kLoads] = {};
#pragma unroll
      for (int l = 0; l < kLoads; ++l) {
        const std::int64_t v = round + l * kWarp + lane;
        if (v < vectors) words[l] = __ldg(vp + v);
      }
#pragma unroll
      for (int l = 0; l < kLoads; ++l) {
        const std::int64_t v = round + l * kWarp + lane;
        if (v < vectors) {
          U elements[V];
          memcpy(elements, &words[l], sizeof elements);
#pragma unroll
          for (int e = 0; e < V; ++e) {
            offer<U, Kind, K>(list, threshold, descending, elements[e], start + v * V + e);
          }
        }
      }
      threshold = warp_max(list[K - 1].key());
    }
    for (std::int64_t j = start + vectors * V + lane; j < end; j += kWarp) {
      offer<U, Kind, K>(list, threshold, descending, p[j], j);
    }

    warp_merge(list);
    if (a.segments == 1) {
      write_results(list, p, row, a.k, a.wide_indices, a.values, a.indices, lane);
    } else {
      C* out = static_cast<C*>(a.partial) + unit * K;
#pragma unroll
      for (int j = 0; j < K; ++j) {
        if (j == lane) out[j] = list[j];
      }
    }
  }
}

template <class U, int K>
__global__ void __launch_bounds__(kBlock) merge_segments(const U* __restrict__ input, MergeArgs a) {
  using C = Candidate<U>;
  __shared__ C warp_lists[kWarpsPerBlock][K];
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const C* partial = static_cast<const C*>(a.partial);
  for (std::int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    C list[K];
#pragma unroll
    for (int i = 0; i < K; ++i) list[i] = C::none();
    for (std::int64_t s = threadIdx.x; s < a.segments; s += kBlock) {
      const C* from = partial + (row * a.segments + s) * K;
      C other[K];
#pragma unroll
      for (int i = 0; i < K; ++i) other[i] = from[i];
      merge_best(list, other);
    }
    warp_merge(list);
    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < K; ++i) warp_lists[warp][i] = list[i];
    }
    __syncthreads();
    if (warp == 0) {
#pragma unroll
      for (int i = 0; i < K; ++i) list[i] = lane < kWarpsPerBlock ? warp_lists[lane][i] : C::none();
      warp_merge(list);
      write_results(list, input + row * a.n, row, a.k, a.wide_indices, a.values, a.indices, lane);
    }
    __syncthreads();  // warp_lists is reused by the next row
  }
}

}  // namespace kiln::cuda::lib::topk_detail
