// Stream compaction by a mask of bytes (kiln's Bool: 0 or 1), on the device with CUB: what
// mask_select and argwhere need. Their output size is the number of set flags, which the caller
// must know to allocate the output: count_flags writes it to device memory and the caller reads
// those 8 bytes back (the one unavoidable synchronisation); everything else stays on the device.
//
// Usage (the items of x[n] whose flag is set, 4-byte items):
//   std::size_t bytes = compaction_workspace_bytes(n, 4);     // host only, no launch
//   count_flags(flags, n, count, ws, bytes, stream);          // count: one device int64
//   ... read count back, allocate out[count] ...
//   select_flagged(4, x, flags, n, out, ws, bytes, stream);   // asynchronous on stream
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kiln::cuda::lib {

// Bytes of device workspace for either call on n flags (item_bytes: 0 when only counting, or
// 8 for flagged_positions). 256-byte aligned pieces; 0 when n is 0.
[[nodiscard]] std::size_t compaction_workspace_bytes(std::int64_t n, std::size_t item_bytes);

// *count (device memory) = the number of nonzero bytes among flags[0, n).
void count_flags(const void* flags, std::int64_t n, std::int64_t* count, void* workspace,
                 std::size_t workspace_bytes, cudaStream_t stream);

// out[0, count) = the items (of item_bytes: 1, 2, 4 or 8) whose flag is set, in order.
void select_flagged(std::size_t item_bytes, const void* items, const void* flags, std::int64_t n,
                    void* out, void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

// out[0, count) = the positions (i64) of the set flags, ascending.
void flagged_positions(const void* flags, std::int64_t n, std::int64_t* out, void* workspace,
                       std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace kiln::cuda::lib
