// Sorting rows of a contiguous [rows, n] device buffer with CUB, on the device only (nothing
// passes through the host). The order is exactly the CPU backend's (src/backends/cpu/cpu_sort.cpp):
//   - stable: equal keys keep their input order, ascending and descending alike;
//   - NaN is the largest value: last ascending, first descending; NaNs keep their input order;
//   - -0.0 and +0.0 are equal (so they too keep their input order), and the values written are
//     the input's own bits (the sign of zero and NaN payloads survive);
//   - topk (keep >= 0) is the first `keep` entries of that stable order: largest first when
//     descending, ties by the lower index, NaN counted as the largest.
//
// Usage (sort each row of x[rows, n] f32 descending, with i64 indices):
//   SortDesc desc{.dtype = DType::F32, .rows = rows, .n = n, .descending = true,
//                 .with_indices = true, .index_dtype = DType::I64};
//   std::size_t bytes = sort_workspace_bytes(desc);          // host only, no launch
//   void* ws = allocator.allocate(bytes, stream);              // caller's memory
//   sort_rows(desc, x, values, indices, ws, bytes, stream);     // asynchronous on stream
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::cuda::lib {

struct SortDesc {
  DType dtype = DType::F32;  // every float and integer dtype (not Bool)
  std::int64_t rows = 1;     // independent rows, each of n elements, row-major and contiguous
  std::int64_t n = 0;        // at most 2^31 - 1 (positions are sorted as 32-bit integers)
  bool descending = false;
  std::int64_t keep = -1;          // -1: the whole sorted row; else topk: the first keep (<= n)
  bool with_indices = false;       // write each kept entry's position in its input row
  DType index_dtype = DType::I64;  // I64 or I32, when with_indices
};

// Throws InvalidArgument naming the field when desc cannot be sorted.
void validate(const SortDesc& desc);

// Bytes of device workspace sort_rows needs for desc (0 when there is nothing to sort).
[[nodiscard]] std::size_t sort_workspace_bytes(const SortDesc& desc);

// Sorts every row of input[rows, n] and writes, row-major [rows, keep or n]:
//   values  - the sorted elements (nullptr: not written, as for argsort),
//   indices - their positions in the input row, as index_dtype (must be set iff with_indices).
// workspace: at least sort_workspace_bytes(desc), 256-byte aligned, used until the stream
// passes this work. Outputs must not overlap the input. Asynchronous on stream.
void sort_rows(const SortDesc& desc, const void* input, void* values, void* indices,
               void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace kiln::cuda::lib
