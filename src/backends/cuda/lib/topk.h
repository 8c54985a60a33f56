// topk of the rows of a contiguous [rows, n] device buffer by selection, without sorting the rows
// (lib/sort.h sorts them; this reads each element once). For k up to max_select_k(dtype): a warp
// walks a row (or a segment of a long row, when there are too few rows to fill the GPU) with
// 16-byte loads, every lane keeping its best k in registers and rejecting most elements with one
// compare against a warp-wide threshold; the lanes' lists merge by shuffles, segments' lists in a
// second kernel. The result is exactly the CPU backend's (src/backends/cpu/cpu_sort.cpp): largest
// (or smallest) first, ties by the lower index, NaN the largest value, -0.0 equal to +0.0, and the
// values written are the input's own bits.
//
// Usage (top 8 of each row of x[rows, n] f32, with i64 indices):
//   TopkDesc desc{.dtype = DType::F32, .rows = rows, .n = n, .k = 8, .largest = true,
//                 .index_dtype = DType::I64};
//   if (topk_selects(desc)) {
//     std::size_t bytes = topk_workspace_bytes(desc);           // host only, no launch
//     topk_rows(desc, x, values, indices, workspace, bytes, stream);  // asynchronous on stream
//   }
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::cuda::lib {

// Larger k takes the row sort. Each lane's list lives in registers: 32 entries of a key up to 32
// bits are 64 registers (168 in all on sm_90); a 64-bit key's entry takes three, and at 32 of
// them the kernel spills (255 registers and kilobytes of local memory), so those stop at 16.
inline constexpr std::int64_t kMaxSelectK = 32;
constexpr std::int64_t max_select_k(DType dtype) {
  return dtype_size(dtype) == 8 ? 16 : kMaxSelectK;
}

struct TopkDesc {
  DType dtype = DType::F32;        // every float and integer dtype (not Bool)
  std::int64_t rows = 1;           // independent rows, each of n elements, row-major and contiguous
  std::int64_t n = 0;              // at most 2^31 - 1
  std::int64_t k = 0;              // 0 .. min(n, max_select_k(dtype))
  bool largest = true;             // largest first; else smallest first
  DType index_dtype = DType::I64;  // I64 or I32
};

// Whether desc is one this selection takes (k <= max_select_k(dtype)); otherwise sort the rows.
[[nodiscard]] bool topk_selects(const TopkDesc& desc);

// Throws InvalidArgument naming the field (UnsupportedDType for the dtype) when desc cannot be
// selected.
void validate(const TopkDesc& desc);

// Bytes of device workspace topk_rows needs for desc (0 unless long rows are split in segments).
[[nodiscard]] std::size_t topk_workspace_bytes(const TopkDesc& desc);

// Writes, row-major [rows, k]: values (the selected elements' own bits) and indices (their
// positions in the input row, as index_dtype). workspace: at least topk_workspace_bytes(desc),
// 256-byte aligned (may be null when that is 0). Outputs must not overlap the input.
// Asynchronous on stream.
void topk_rows(const TopkDesc& desc, const void* input, void* values, void* indices,
               void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace kiln::cuda::lib
