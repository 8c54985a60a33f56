// Row sort with CUB radix sorts (the kernels; sort.cpp validates and dispatches). Every dtype is
// sorted as unsigned integer keys: a prepare pass maps each element to an order-preserving key of
// its width (NaN -> the largest key, -0.0 -> +0.0's key, descending -> the complement, so CUB only
// ever sorts ascending and stays stable) and a finish pass maps keys back and writes the outputs.
// 8- and 16-bit keys are zero-extended to 32 bits (SortKey), so CUB is compiled for two key types,
// not for twelve dtypes (nor for descending): each key type costs nvcc minutes. Keys that several
// bit patterns share (+-0, NaNs) are written back from the input itself, so the values are the
// input's own bits: through the positions carried by the sort when indices are wanted, otherwise
// from stream-compacted lists of the input's zeros and NaNs (the sort is stable, so a row's i-th
// zero key stands for its i-th zero), which lets the sort move keys only.
#pragma once

#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <algorithm>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_sort.cuh>
#include <cub/device/device_select.cuh>
#include <limits>
#include <type_traits>

#include "backends/cuda/check.h"
#include "backends/cuda/lib/key_codec.cuh"
#include "backends/cuda/lib/sort_detail.h"
#include "backends/cuda/lib/workspace.h"

namespace kiln::cuda::lib::sort_detail {

// The key CUB sorts for dtype bits U. A widened key's high bits are zero: a radix sort given the
// bit range [0, kKeyBits<U>) skips them, and a sort over all bits orders it the same.
template <class U>
using SortKey = std::conditional_t<(sizeof(U) < sizeof(std::uint32_t)), std::uint32_t, U>;
template <class U>
inline constexpr int kKeyBits = int(8 * sizeof(U));

__device__ inline std::int64_t global_thread() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::int64_t grid_threads() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

template <class U, KeyKind K>
__global__ void prepare_keys(const U* __restrict__ input, SortKey<U>* __restrict__ keys,
                             std::uint32_t* __restrict__ positions, std::int64_t total,
                             std::int64_t n, bool descending) {
  using Codec = KeyCodec<U, K>;
  for (std::int64_t i = global_thread(); i < total; i += grid_threads()) {
    keys[i] = SortKey<U>(Codec::encode(input[i], descending));
    if (positions != nullptr) positions[i] = static_cast<std::uint32_t>(total == n ? i : i % n);
  }
}

// Stream-compacted lists of where the input's zeros and NaNs are (global positions, ascending).
// A sort is stable, so the i-th entry of a row's run of zero keys is the row's i-th zero.
struct SpecialLists {
  const std::uint32_t* zeros = nullptr;  // null: no lists (positions or no floats)
  const std::uint32_t* nans = nullptr;
  const std::int64_t* counts = nullptr;  // [zeros, nans], written by DeviceSelect
};

// The input bits behind sorted entry `from`, whose key several bit patterns share.
template <class U>
__device__ U restore_special(const SortKey<U>* __restrict__ keys, const U* __restrict__ input,
                             const SpecialLists& lists, std::int64_t from, std::int64_t row_start,
                             std::int64_t n, SortKey<U> stored, bool nan) {
  // Start of the run of equal keys in this row (keys are ascending as stored).
  std::int64_t lo = row_start;
  std::int64_t hi = row_start + n;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] < stored)
      lo = mid + 1;
    else
      hi = mid;
  }
  const std::int64_t rank = from - lo;
  // First entry of this row in the list.
  const std::uint32_t* list = nan ? lists.nans : lists.zeros;
  std::int64_t a = 0;
  std::int64_t b = lists.counts[nan ? 1 : 0];
  while (a < b) {
    const std::int64_t mid = a + (b - a) / 2;
    if (static_cast<std::int64_t>(list[mid]) < row_start)
      a = mid + 1;
    else
      b = mid;
  }
  return input[list[a + rank]];
}

template <class U, KeyKind K>
__global__ void finish_rows(const SortKey<U>* __restrict__ keys,
                            const std::uint32_t* __restrict__ positions, SpecialLists lists,
                            const U* __restrict__ input, U* __restrict__ values,
                            void* __restrict__ indices, bool wide_indices, std::int64_t rows,
                            std::int64_t n, std::int64_t keep, bool descending) {
  using Codec = KeyCodec<U, K>;
  const std::int64_t total = rows * keep;
  for (std::int64_t o = global_thread(); o < total; o += grid_threads()) {
    const std::int64_t row = rows == 1 ? 0 : o / keep;
    const std::int64_t row_start = row * n;
    const std::int64_t from = row_start + (o - row * keep);
    if (values != nullptr) {
      const SortKey<U> stored = keys[from];
      // A widened key narrows back exactly: its high bits are zero.
      const U key = Codec::ascending_key(U(stored), descending);
      U value = Codec::decode(key);
      if (Codec::shared_key(key)) {
        if (positions != nullptr) {
          value = input[row_start + positions[from]];
        } else if (lists.zeros != nullptr) {
          value = restore_special<U>(keys, input, lists, from, row_start, n, stored,
                                     key == Codec::kNanKey);
        }
      }
      values[o] = value;
    }
    if (indices != nullptr) {
      if (wide_indices) {
        static_cast<std::int64_t*>(indices)[o] = positions[from];
      } else {
        static_cast<std::int32_t*>(indices)[o] = static_cast<std::int32_t>(positions[from]);
      }
    }
  }
}

// The start of row r, for CUB's segment offsets.
struct RowStart {
  std::int64_t n;
  __host__ __device__ std::int64_t operator()(std::int64_t row) const { return row * n; }
};

// DeviceSelect's predicate: position i holds a float zero (nan = false) or a NaN (nan = true),
// the values KeyCodec encodes as kZeroKey and kNanKey. The format comes at run time as its
// infinity's bits, so the float dtypes of one width (F16, BF16) share one compaction.
template <class U>
struct IsSpecial {
  const U* input;
  U infinity_bits;
  bool nan;
  __device__ bool operator()(std::uint32_t i) const {
    const U magnitude = U(input[i] & U(~KeyCodec<U, KeyKind::Unsigned>::kSign));
    return nan ? magnitude > infinity_bits : magnitude == 0;
  }
};

enum class Strategy {
  Whole,      // one row: a device-wide radix sort
  PerRow,     // a few long rows: a device-wide radix sort per row
  Segmented,  // many rows: CUB's segmented sort (small rows in warps, large in blocks)
};

inline Strategy choose_strategy(const SortDesc& desc) {
  if (desc.rows == 1) return Strategy::Whole;
  // A segmented sort gives each row at most one block; a long row wants the whole device.
  if (desc.n >= (std::int64_t{1} << 17) && desc.rows <= 64) return Strategy::PerRow;
  return Strategy::Segmented;
}

// One CUB call (a size query when temp is null). values == nullptr sorts keys only, which only the
// device-wide radix sort does: a keys-only segmented sort would be a second segmented sort for nvcc
// to compile (a third of these files' build time), so segmented sorts always carry positions. The
// radix sort orders bits [0, key_bits); the segmented sort takes no range and orders all of them.
template <class W>
void cub_sort(void* temp, std::size_t& temp_bytes, cub::DoubleBuffer<W>& keys,
              cub::DoubleBuffer<std::uint32_t>* values, std::int64_t items, std::int64_t rows,
              std::int64_t n, bool segmented, int key_bits, cudaStream_t stream) {
  if (!segmented) {
    if (values != nullptr) {
      KILN_CUDA_CHECK("sort", cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, *values,
                                                              items, 0, key_bits, stream));
    } else {
      KILN_CUDA_CHECK("sort", cub::DeviceRadixSort::SortKeys(temp, temp_bytes, keys, items, 0,
                                                             key_bits, stream));
    }
    return;
  }
  const thrust::counting_iterator<std::int64_t> row{0};
  const auto begin = thrust::make_transform_iterator(row, RowStart{n});
  KILN_CUDA_CHECK("sort",
                  cub::DeviceSegmentedSort::StableSortPairs(temp, temp_bytes, keys, *values, items,
                                                            rows, begin, begin + 1, stream));
}

// How the values of keys that several bit patterns share (+-0, NaNs) get their input bits back.
enum class Restore {
  None,        // integers: every key is one value
  Positions,   // positions travel with the keys (they are the indices when indices are wanted)
  Compaction,  // float values only, not segmented: lists of the input's zeros and NaNs (keys only)
};

inline Restore restore_mode(const SortDesc& desc) {
  // Segmented sorts always carry positions (cub_sort).
  if (desc.with_indices || choose_strategy(desc) == Strategy::Segmented) return Restore::Positions;
  if (!is_float(desc.dtype)) return Restore::None;
  // The lists hold 32-bit global positions.
  const bool fits = desc.rows * desc.n < (std::int64_t{1} << 32);
  return fits && !float_values_by_positions() ? Restore::Compaction : Restore::Positions;
}

// Workspace: two key buffers and two position buffers (CUB's double buffers), the special lists
// and their counts, then CUB's own (shared by the sort and the compactions, which run in turn).
struct Layout {
  Restore restore;
  std::size_t keys;       // bytes of one key buffer
  std::size_t positions;  // bytes of one position buffer (0 without positions)
  std::size_t list;       // bytes of one special list (0 without compaction)
  std::size_t cub;        // CUB's temporary storage
  std::size_t counts() const { return list ? kWorkspaceAlignment : 0; }
  std::size_t total() const { return 2 * keys + 2 * positions + 2 * list + counts() + cub; }
};

template <class U>
std::size_t select_bytes(std::int64_t items) {
  std::size_t bytes = 0;
  KILN_CUDA_CHECK("sort",
                  cub::DeviceSelect::If(nullptr, bytes, thrust::counting_iterator<std::uint32_t>(0),
                                        static_cast<std::uint32_t*>(nullptr),
                                        static_cast<std::int64_t*>(nullptr), items,
                                        IsSpecial<U>{nullptr, U(0), false}, nullptr));
  return bytes;
}

template <class U, KeyKind K>
Layout plan_layout(const SortDesc& desc) {
  const std::int64_t items = desc.rows * desc.n;
  Layout layout{};
  layout.restore = restore_mode(desc);
  layout.keys = align_up(static_cast<std::size_t>(items) * sizeof(SortKey<U>));
  const std::size_t one_u32 = align_up(static_cast<std::size_t>(items) * sizeof(std::uint32_t));
  layout.positions = layout.restore == Restore::Positions ? one_u32 : 0;
  layout.list = layout.restore == Restore::Compaction ? one_u32 : 0;
  // A size query: CUB reads only sizes, never the (null) buffers.
  cub::DoubleBuffer<SortKey<U>> keys(nullptr, nullptr);
  cub::DoubleBuffer<std::uint32_t> positions(nullptr, nullptr);
  const Strategy strategy = choose_strategy(desc);
  const std::int64_t per_call = strategy == Strategy::PerRow ? desc.n : items;
  std::size_t bytes = 0;
  cub_sort(nullptr, bytes, keys, layout.positions ? &positions : nullptr, per_call, desc.rows,
           desc.n, strategy == Strategy::Segmented, kKeyBits<U>, nullptr);
  // Only floats compact (restore_mode): integer dtypes compile no DeviceSelect.
  if constexpr (KeyCodec<U, K>::kFloat) {
    if (layout.restore == Restore::Compaction) bytes = std::max(bytes, select_bytes<U>(items));
  }
  layout.cub = align_up(bytes);
  return layout;
}

inline int grid_for(std::int64_t items) {
  constexpr std::int64_t kMaxBlocks = 132 * 16;  // enough to fill an H100/H200; grid-stride beyond
  return static_cast<int>(std::clamp<std::int64_t>((items + 255) / 256, 1, kMaxBlocks));
}

template <class U, KeyKind K>
void sort_typed(const SortDesc& desc, const void* input, void* values, void* indices,
                void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  const Layout layout = plan_layout<U, K>(desc);
  if (workspace_bytes < layout.total() || workspace == nullptr) {
    detail::fail<InvalidArgument>("sort", "workspace of ", workspace_bytes, " bytes, need ",
                                  layout.total());
  }
  using W = SortKey<U>;
  const std::int64_t items = desc.rows * desc.n;
  auto* base = static_cast<unsigned char*>(workspace);
  W* keys0 = reinterpret_cast<W*>(base);
  W* keys1 = reinterpret_cast<W*>(base + layout.keys);
  std::uint32_t* pos0 = nullptr;
  std::uint32_t* pos1 = nullptr;
  if (layout.positions) {
    pos0 = reinterpret_cast<std::uint32_t*>(base + 2 * layout.keys);
    pos1 = reinterpret_cast<std::uint32_t*>(base + 2 * layout.keys + layout.positions);
  }
  SpecialLists lists;
  std::uint32_t* zeros = nullptr;
  std::uint32_t* nans = nullptr;
  std::int64_t* counts = nullptr;
  std::size_t at = 2 * layout.keys + 2 * layout.positions;
  if (layout.list) {
    zeros = reinterpret_cast<std::uint32_t*>(base + at);
    nans = reinterpret_cast<std::uint32_t*>(base + at + layout.list);
    counts = reinterpret_cast<std::int64_t*>(base + at + 2 * layout.list);
    lists = {zeros, nans, counts};
    at += 2 * layout.list + layout.counts();
  }
  void* temp = base + at;
  const U* in = static_cast<const U*>(input);

  prepare_keys<U, K>
      <<<grid_for(items), 256, 0, stream>>>(in, keys0, pos0, items, desc.n, desc.descending);
  KILN_CUDA_CHECK("sort", cudaGetLastError());

  const Strategy strategy = choose_strategy(desc);
  W* sorted_keys = nullptr;
  std::uint32_t* sorted_positions = nullptr;
  if (strategy == Strategy::PerRow) {
    // Every row has the same length, so CUB takes the same number of passes and each row ends
    // in the same buffer; a row that did not is copied over to keep one layout for finish.
    int final_selector = -1;
    for (std::int64_t r = 0; r < desc.rows; ++r) {
      const std::int64_t at = r * desc.n;
      cub::DoubleBuffer<W> keys(keys0 + at, keys1 + at);
      cub::DoubleBuffer<std::uint32_t> positions(pos0 ? pos0 + at : nullptr,
                                                 pos1 ? pos1 + at : nullptr);
      std::size_t bytes = layout.cub;
      cub_sort(temp, bytes, keys, pos0 ? &positions : nullptr, desc.n, 1, desc.n, false,
               kKeyBits<U>, stream);
      if (final_selector < 0) final_selector = keys.selector;
      if (keys.selector != final_selector) {
        W* target = final_selector ? keys1 + at : keys0 + at;
        KILN_CUDA_CHECK("sort", cudaMemcpyAsync(target, keys.Current(), desc.n * sizeof(W),
                                                cudaMemcpyDeviceToDevice, stream));
        if (pos0) {
          std::uint32_t* target_pos = final_selector ? pos1 + at : pos0 + at;
          KILN_CUDA_CHECK("sort", cudaMemcpyAsync(target_pos, positions.Current(),
                                                  desc.n * sizeof(std::uint32_t),
                                                  cudaMemcpyDeviceToDevice, stream));
        }
      }
    }
    sorted_keys = final_selector ? keys1 : keys0;
    if (pos0) sorted_positions = final_selector ? pos1 : pos0;
  } else {
    cub::DoubleBuffer<W> keys(keys0, keys1);
    cub::DoubleBuffer<std::uint32_t> positions(pos0, pos1);
    std::size_t bytes = layout.cub;
    cub_sort(temp, bytes, keys, pos0 ? &positions : nullptr, items, desc.rows, desc.n,
             strategy == Strategy::Segmented, kKeyBits<U>, stream);
    sorted_keys = keys.Current();
    if (pos0) sorted_positions = positions.Current();
  }

  if constexpr (KeyCodec<U, K>::kFloat) {
    if (layout.restore == Restore::Compaction && values != nullptr) {
      for (bool nan : {false, true}) {
        std::size_t bytes = layout.cub;
        const IsSpecial<U> is_special{in, KeyCodec<U, K>::infinity_bits(), nan};
        KILN_CUDA_CHECK(
            "sort", cub::DeviceSelect::If(temp, bytes, thrust::counting_iterator<std::uint32_t>(0),
                                          nan ? nans : zeros, counts + (nan ? 1 : 0), items,
                                          is_special, stream));
      }
    }
  }

  const std::int64_t keep = desc.keep < 0 ? desc.n : desc.keep;
  finish_rows<U, K><<<grid_for(desc.rows * keep), 256, 0, stream>>>(
      sorted_keys, sorted_positions, lists, in, static_cast<U*>(values),
      desc.with_indices ? indices : nullptr, desc.index_dtype == DType::I64, desc.rows, desc.n,
      keep, desc.descending);
  KILN_CUDA_CHECK("sort", cudaGetLastError());
}

template <class U, KeyKind K>
std::size_t workspace_bytes(const SortDesc& desc) {
  return plan_layout<U, K>(desc).total();
}

}  // namespace kiln::cuda::lib::sort_detail
