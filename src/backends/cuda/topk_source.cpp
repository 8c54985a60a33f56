// Source generation of the selection topk (topk.h): one module per (kernel, key width, key kind
// for the select kernel, list length K). The lists come from topk_lists.h, embedded by CMake.
#include <fmt/format.h>

#include <string>

#include "backends/cuda/topk.h"
#include "backends/cuda/topk_lists_source.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::cuda {

using namespace fmt::literals;

namespace {

// The launch parameters (TopkParams in topk.h mirrors it), the geometry both kernels share, and
// the warp-wide steps on the lanes' lists.
constexpr const char* kCommon = R"CUDA(
typedef long long i64;
typedef unsigned long long u64;
using namespace kiln::cuda::topk_lists;
typedef Candidate<U> C;
constexpr int kWarp = 32;
constexpr int kBlock = 256;
constexpr int kWarpsPerBlock = kBlock / kWarp;
constexpr unsigned kAllLanes = 0xffffffffu;

struct P {
  i64 rows, n, segments, segment, k;
  u64 input, values, indices, partial;  // partial: [rows, segments, K] lists when segments > 1
  int largest, wide_indices;            // wide_indices: i64 indices, else i32
};

template <class T>
__device__ __forceinline__ Candidate<T> shuffle_xor(const Candidate<T>& c, int mask) {
  if constexpr (sizeof(T) == 8) {
    return {__shfl_xor_sync(kAllLanes, c.key_bits, mask), __shfl_xor_sync(kAllLanes, c.rank, mask)};
  } else {
    return {__shfl_xor_sync(kAllLanes, c.word, mask)};
  }
}

// Every lane's list becomes the K best of the warp's lists (all lanes converged). Each step
// exchanges two entries with the partner lane, read before either side changes them.
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

// Lane j < k writes result j of the row: the input's own bits at the entry's position, and the
// position.
__device__ __forceinline__ void write_results(const C (&list)[K], const U* row_input, i64 row,
                                              const P& a, int lane) {
#pragma unroll
  for (int j = 0; j < K; ++j) {
    if (j == lane && j < a.k) {
      const unsigned position = list[j].position();
      const i64 at = row * a.k + j;
      reinterpret_cast<U*>(a.values)[at] = row_input[position];
      if (a.wide_indices) {
        reinterpret_cast<i64*>(a.indices)[at] = position;
      } else {
        reinterpret_cast<int*>(a.indices)[at] = static_cast<int>(position);
      }
    }
  }
}
)CUDA";

// A warp per (row, segment). Lanes read the segment with 16-byte loads (the unaligned head and the
// tail element by element), each keeping its best K in registers. After each round of loads the
// warp shares a threshold, the best K-th key of any lane: an element below it has K better ones in
// one lane alone, so it is rejected with one compare (after the first rounds, nearly every
// element). The lanes' lists merge by shuffles; the warp writes the row's k results, or its
// segment's list of K.
//
// Keys map each dtype's bits to an unsigned order (lib/key_codec.cuh does the same for the sort):
// NaN (either sign, any payload) the largest, -0.0 and +0.0 one key, integers by value.
constexpr const char* kSelect = R"CUDA(
constexpr int kLoads = 4;  // 16-byte loads in flight per lane
constexpr U kSign = U(U(1) << (8 * sizeof(U) - 1));
__device__ __forceinline__ U encode(U bits, bool descending) {
  U key = bits;
  if constexpr (kSignedKey) {
    key = U(bits ^ kSign);
  } else if constexpr (kFloatKey) {
    const U magnitude = U(bits & U(~kSign));
    if (magnitude > kInfinityBits) {
      key = U(~U(0));  // NaN
    } else if (magnitude == 0) {
      key = kSign;  // +0.0 and -0.0
    } else {
      key = (bits & kSign) ? U(~bits) : U(bits | kSign);
    }
  }
  return descending ? U(~key) : key;
}

// The largest of the lanes' keys.
__device__ __forceinline__ U warp_max(U key) {
  W value = key;
#pragma unroll
  for (int mask = kWarp / 2; mask > 0; mask /= 2) {
    const W other = __shfl_xor_sync(kAllLanes, value, mask);
    value = other > value ? other : value;
  }
  return static_cast<U>(value);
}

// Element `bits` at `position` offered to the lane's list.
__device__ __forceinline__ void offer(C (&list)[K], U threshold, bool descending, U bits, i64 position) {
  const U key = encode(bits, descending);
  if (key < threshold) return;
  const C c = C::of(key, static_cast<unsigned>(position));
  if (c.before(list[K - 1])) insert(list, c);
}

__device__ __forceinline__ void select_rows(const U* __restrict__ input, const P& a) {
  constexpr int V = 16 / sizeof(U);  // elements per 16-byte load
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const bool descending = !a.largest;  // smallest first: complemented keys, best is largest
  const i64 units = a.rows * a.segments;
  const i64 stride = static_cast<i64>(gridDim.x) * kWarpsPerBlock;
  // Whole warps take the same units, so every shuffle below has all 32 lanes.
  for (i64 unit = static_cast<i64>(blockIdx.x) * kWarpsPerBlock + static_cast<i64>(threadIdx.x) / kWarp;
       unit < units; unit += stride) {
    const i64 row = unit / a.segments;
    const i64 begin = (unit - row * a.segments) * a.segment;
    const i64 end = begin + a.segment < a.n ? begin + a.segment : a.n;
    const U* p = input + row * a.n;
    C list[K];
#pragma unroll
    for (int i = 0; i < K; ++i) list[i] = C::none();
    U threshold = 0;

    // Element by element up to the first 16-byte boundary.
    const u64 address = reinterpret_cast<u64>(p + begin);
    i64 head = static_cast<i64>(((16 - address % 16) % 16) / sizeof(U));
    if (head > end - begin) head = end - begin;
    for (i64 j = begin + lane; j < begin + head; j += kWarp) {
      offer(list, threshold, descending, p[j], j);
    }
    // 16-byte loads, kLoads per lane in flight; the threshold refreshed after each round.
    const i64 start = begin + head;
    const i64 vectors = (end - start) / V;
    const uint4* vp = reinterpret_cast<const uint4*>(p + start);
    for (i64 round = 0; round < vectors; round += kLoads * kWarp) {
      uint4 words[kLoads] = {};
#pragma unroll
      for (int l = 0; l < kLoads; ++l) {
        const i64 v = round + l * kWarp + lane;
        if (v < vectors) words[l] = __ldg(vp + v);
      }
#pragma unroll
      for (int l = 0; l < kLoads; ++l) {
        const i64 v = round + l * kWarp + lane;
        if (v < vectors) {
          U elements[V];
          memcpy(elements, &words[l], sizeof elements);
#pragma unroll
          for (int e = 0; e < V; ++e) {
            offer(list, threshold, descending, elements[e], start + v * V + e);
          }
        }
      }
      threshold = warp_max(list[K - 1].key());
    }
    for (i64 j = start + vectors * V + lane; j < end; j += kWarp) {
      offer(list, threshold, descending, p[j], j);
    }

    warp_merge(list);
    if (a.segments == 1) {
      write_results(list, p, row, a, lane);
    } else {
      C* out = reinterpret_cast<C*>(a.partial) + unit * K;
#pragma unroll
      for (int j = 0; j < K; ++j) {
        if (j == lane) out[j] = list[j];
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) kiln_topk_select(const P p) {
  select_rows(reinterpret_cast<const U*>(p.input), p);
}
)CUDA";

// A block per row of a segmented plan: threads merge the segments' lists in registers, warps by
// shuffles, the block's eight through shared memory.
constexpr const char* kMerge = R"CUDA(
__shared__ C warp_lists[kWarpsPerBlock][K];

__device__ __forceinline__ void merge_segments(const U* __restrict__ input, const P& a) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const C* partial = reinterpret_cast<const C*>(a.partial);
  for (i64 row = blockIdx.x; row < a.rows; row += gridDim.x) {
    C list[K];
#pragma unroll
    for (int i = 0; i < K; ++i) list[i] = C::none();
    for (i64 s = threadIdx.x; s < a.segments; s += kBlock) {
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
      write_results(list, input + row * a.n, row, a, lane);
    }
    __syncthreads();  // warp_lists is reused by the next row
  }
}

extern "C" __global__ void __launch_bounds__(256) kiln_topk_merge(const P p) {
  merge_segments(reinterpret_cast<const U*>(p.input), p);
}
)CUDA";

const char* key_type(int bits) {
  switch (bits) {
    case 8:
      return "unsigned char";
    case 16:
      return "unsigned short";
    case 32:
      return "unsigned";
    case 64:
      return "unsigned long long";
    default:
      detail::fail<InvalidArgument>("topk", "no key type of ", bits, " bits");
  }
}

// A key kind as keys name it, and the bits of +infinity for a float kind (a float whose
// magnitude bits exceed them is a NaN).
struct KindText {
  const char* name;
  const char* infinity_bits;
};
KindText kind_text(lib::KeyKind kind) {
  switch (kind) {
    case lib::KeyKind::Unsigned:
      return {"unsigned", "0u"};
    case lib::KeyKind::Signed:
      return {"signed", "0u"};
    case lib::KeyKind::F16:
      return {"f16", "0x7c00u"};
    case lib::KeyKind::BF16:
      return {"bf16", "0x7f80u"};
    case lib::KeyKind::F32:
      return {"f32", "0x7f800000u"};
    case lib::KeyKind::F64:
      return {"f64", "0x7ff0000000000000ull"};
  }
  return {"?", "0u"};
}

// dtype's key: its width in bits and how its bits order.
struct KeyOf {
  int bits;
  lib::KeyKind kind;
};
KeyOf key_of(DType dtype) {
  return lib::visit_key_type(dtype, "topk", []<class Key>(Key) {
    return KeyOf{static_cast<int>(8 * sizeof(typename Key::Bits)), Key::kind};
  });
}

}  // namespace

const char* topk_kernel_name(TopkKernel kernel) {
  return kernel == TopkKernel::Select ? "kiln_topk_select" : "kiln_topk_merge";
}

std::string topk_kernel_key(TopkKernel kernel, DType dtype, int list) {
  const KeyOf key = key_of(dtype);
  if (kernel == TopkKernel::Merge) return detail::concat("topk:merge:u", key.bits, ":", list);
  return detail::concat("topk:select:u", key.bits, ":", kind_text(key.kind).name, ":", list);
}

std::string topk_kernel_source(TopkKernel kernel, int bits, lib::KeyKind kind, int list) {
  if (list < 1 || list > (bits == 64 ? 16 : 32) || (list & (list - 1)) != 0) {
    detail::fail<InvalidArgument>("topk", "no list length ", list, " for ", bits, "-bit keys");
  }
  const bool is_float = kind != lib::KeyKind::Signed && kind != lib::KeyKind::Unsigned;
  const std::string head =
      fmt::format(R"CUDA({lists}typedef {U} U;
typedef {W} W;  // U as shuffled
constexpr int K = {K};
{common})CUDA",
                  "lists"_a = kTopkListsSource, "U"_a = key_type(bits),
                  "W"_a = key_type(bits < 32 ? 32 : bits), "K"_a = list, "common"_a = kCommon);
  if (kernel == TopkKernel::Merge) return fmt::format("{}{}", head, kMerge);
  return fmt::format(R"CUDA({head}constexpr bool kSignedKey = {signed_key};
constexpr bool kFloatKey = {float_key};
constexpr U kInfinityBits = {infinity_bits};
{select})CUDA",
                     "head"_a = head, "signed_key"_a = kind == lib::KeyKind::Signed,
                     "float_key"_a = is_float, "infinity_bits"_a = kind_text(kind).infinity_bits,
                     "select"_a = kSelect);
}

std::string topk_kernel_source(TopkKernel kernel, DType dtype, int list) {
  const KeyOf key = key_of(dtype);
  return topk_kernel_source(kernel, key.bits, key.kind, list);
}

}  // namespace kiln::cuda
