// Launches of the selection topk's kernels for one key type (instantiated per width in
// topk_u8.cu ... topk_u64.cu): the list length K picked from k at run time, among 1 .. 32
// (.. 16 for 64-bit keys).
#pragma once

#include <algorithm>

#include "backends/cuda/check.h"
#include "backends/cuda/lib/topk_detail.h"
#include "backends/cuda/lib/topk_kernels.cuh"

namespace kiln::cuda::lib::topk_detail {

// Grids beyond this loop inside the kernels.
inline constexpr std::int64_t kMaxBlocks = std::int64_t{1} << 20;

template <class U, KeyKind Kind, int K>
void launch(const TopkDesc& desc, const TopkPlan& plan, const U* input, void* values, void* indices,
            void* workspace, cudaStream_t stream) {
  const bool wide = desc.index_dtype == DType::I64;
  const SelectArgs select{desc.rows,    desc.n, plan.segments, plan.segment, desc.k,
                          desc.largest, wide,   values,        indices,      workspace};
  const std::int64_t warps = desc.rows * plan.segments;
  const auto blocks =
      static_cast<unsigned>(std::min((warps + kWarpsPerBlock - 1) / kWarpsPerBlock, kMaxBlocks));
  select_rows<U, Kind, K><<<blocks, kBlock, 0, stream>>>(input, select);
  KILN_CUDA_CHECK("topk", cudaGetLastError());
  if (plan.segments == 1) return;
  const MergeArgs merge{desc.rows, desc.n, plan.segments, desc.k, wide, values, indices, workspace};
  merge_segments<U, K>
      <<<static_cast<unsigned>(std::min(desc.rows, kMaxBlocks)), kBlock, 0, stream>>>(input, merge);
  KILN_CUDA_CHECK("topk", cudaGetLastError());
}

template <class U, KeyKind Kind>
void topk_typed(const TopkDesc& desc, const TopkPlan& plan, const void* input, void* values,
                void* indices, void* workspace, cudaStream_t stream) {
  const U* in = static_cast<const U*>(input);
  switch (plan.list) {
    case 1:
      return launch<U, Kind, 1>(desc, plan, in, values, indices, workspace, stream);
    case 2:
      return launch<U, Kind, 2>(desc, plan, in, values, indices, workspace, stream);
    case 4:
      return launch<U, Kind, 4>(desc, plan, in, values, indices, workspace, stream);
    case 8:
      return launch<U, Kind, 8>(desc, plan, in, values, indices, workspace, stream);
    case 16:
      return launch<U, Kind, 16>(desc, plan, in, values, indices, workspace, stream);
    case 32:
      if constexpr (sizeof(U) < 8) {  // max_select_k: 64-bit keys stop at 16
        return launch<U, Kind, 32>(desc, plan, in, values, indices, workspace, stream);
      }
      break;
    default:
      break;
  }
  detail::fail<InvalidArgument>("topk", "no list length ", plan.list, " (k = ", desc.k, ")");
}

}  // namespace kiln::cuda::lib::topk_detail

// The explicit instantiation of topk_typed for one key type, inside namespace topk_detail
// (topk_u8.cu ... topk_u64.cu).
#define KILN_TOPK_INSTANTIATE(U, KIND)                                                        \
  template void topk_typed<U, KeyKind::KIND>(const TopkDesc&, const TopkPlan&, const void*, \
                                             void*, void*, void*, cudaStream_t)
