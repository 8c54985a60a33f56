// Internal to kiln_cuda_lib: how topk_rows splits its work, and the per-key-width entry points
// (topk_launch.cuh, instantiated in topk_u8.cu ... topk_u64.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backends/cuda/lib/keys.h"
#include "backends/cuda/lib/topk.h"
#include "backends/cuda/lib/topk_select.h"

namespace kiln::cuda::lib::topk_detail {

// A warp per row fills the GPU from about this many rows (132 SMs x 32 resident warps on an
// H100/H200: enough loads in flight to reach the copy bandwidth). Fewer, long rows are cut into
// segments of at least kMinSegment elements (128 per lane), a warp each, whose lists a second
// kernel merges.
inline constexpr std::int64_t kTargetWarps = 4096;
inline constexpr std::int64_t kMinSegment = 4096;

struct TopkPlan {
  int list = 1;               // K: the list length compiled for k
  std::int64_t segments = 1;  // per row
  std::int64_t segment = 0;   // elements per segment (the last may be shorter)
};

inline TopkPlan plan_topk(const TopkDesc& desc) {
  TopkPlan plan;
  plan.list = list_length(desc.k);
  plan.segment = desc.n;
  if (desc.rows > 0 && desc.rows < kTargetWarps && desc.n > kMinSegment) {
    const std::int64_t wanted = (kTargetWarps + desc.rows - 1) / desc.rows;
    const std::int64_t most = (desc.n + kMinSegment - 1) / kMinSegment;
    const std::int64_t segments = std::min(wanted, most);
    // Multiples of 64 elements: every segment starts as aligned as its row.
    plan.segment = ((desc.n + segments - 1) / segments + 63) / 64 * 64;
    plan.segments = (desc.n + plan.segment - 1) / plan.segment;
  }
  return plan;
}

// Bytes of one list entry (Candidate) for dtype's key width.
inline std::size_t candidate_bytes(DType dtype) { return dtype_size(dtype) == 8 ? 16 : 8; }

template <class U, KeyKind K>
void topk_typed(const TopkDesc& desc, const TopkPlan& plan, const void* input, void* values,
                void* indices, void* workspace, cudaStream_t stream);

}  // namespace kiln::cuda::lib::topk_detail
