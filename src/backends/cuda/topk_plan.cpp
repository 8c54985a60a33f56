// Selection topk on the host: validation, how the rows are split, the launches and the workspace.
#include <algorithm>
#include <limits>

#include "backends/cuda/lib/workspace.h"
#include "backends/cuda/topk.h"
#include "backends/cuda/topk_lists.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::cuda {

namespace {
constexpr std::int64_t kWarpsPerBlock = kTopkBlock / 32;
}  // namespace

void validate(const TopkDesc& desc) {
  const char* op = "topk";
  if (desc.rows < 0 || desc.n < 0) {
    detail::fail<InvalidArgument>(op, "rows ", desc.rows, " and n ", desc.n,
                                  " must not be negative");
  }
  if (desc.n > std::numeric_limits<std::int32_t>::max()) {
    detail::fail<InvalidArgument>(op, "row length ", desc.n, " exceeds 2^31 - 1");
  }
  if (desc.n > 0 && desc.rows > std::numeric_limits<std::int64_t>::max() / desc.n) {
    detail::fail<InvalidArgument>(op, "rows ", desc.rows, " x n ", desc.n, " overflows");
  }
  lib::visit_key_type(desc.dtype, op, [](auto) {});  // rejects Bool and QFloat
  if (desc.k < 0 || desc.k > desc.n || desc.k > max_select_k(desc.dtype)) {
    detail::fail<InvalidArgument>(op, "k = ", desc.k, " must be in [0, min(n = ", desc.n, ", ",
                                  max_select_k(desc.dtype), ")] for ", dtype_name(desc.dtype));
  }
  if (desc.index_dtype != DType::I64 && desc.index_dtype != DType::I32) {
    detail::fail<InvalidArgument>(op, "index dtype must be i64 or i32, got ",
                                  dtype_name(desc.index_dtype));
  }
}

TopkPlan plan_topk(const TopkDesc& desc) {
  validate(desc);
  TopkPlan plan;
  plan.list = list_length(desc.k);
  plan.segment = desc.n;
  if (desc.rows > 0 && desc.rows < kTopkTargetWarps && desc.n > kTopkMinSegment) {
    const std::int64_t wanted = (kTopkTargetWarps + desc.rows - 1) / desc.rows;
    const std::int64_t most = (desc.n + kTopkMinSegment - 1) / kTopkMinSegment;
    const std::int64_t segments = std::min(wanted, most);
    // Multiples of 64 elements: every segment starts as aligned as its row.
    plan.segment = ((desc.n + segments - 1) / segments + 63) / 64 * 64;
    plan.segments = (desc.n + plan.segment - 1) / plan.segment;
  }
  if (desc.rows == 0 || desc.k == 0) return plan;  // nothing to write
  const std::int64_t warps = desc.rows * plan.segments;
  plan.launches.push_back(
      {TopkKernel::Select, static_cast<unsigned>(std::min(
                               (warps + kWarpsPerBlock - 1) / kWarpsPerBlock, kTopkMaxBlocks))});
  if (plan.segments > 1) {
    plan.launches.push_back(
        {TopkKernel::Merge, static_cast<unsigned>(std::min(desc.rows, kTopkMaxBlocks))});
  }
  return plan;
}

std::size_t candidate_bytes(DType dtype) {
  static_assert(sizeof(topk_lists::Candidate<std::uint32_t>) == 8 &&
                    sizeof(topk_lists::Candidate<std::uint64_t>) == 16,
                "the generated kernels' list entries");
  return dtype_size(dtype) == 8 ? 16 : 8;
}

std::size_t topk_workspace_bytes(const TopkDesc& desc) {
  const TopkPlan plan = plan_topk(desc);  // validates desc
  if (plan.segments == 1 || plan.launches.empty()) return 0;
  return lib::align_up(static_cast<std::size_t>(desc.rows * plan.segments * plan.list) *
                       candidate_bytes(desc.dtype));
}

TopkParams topk_params(const TopkDesc& desc, const TopkPlan& plan) {
  return TopkParams{.rows = desc.rows,
                    .n = desc.n,
                    .segments = plan.segments,
                    .segment = plan.segment,
                    .k = desc.k,
                    .input = 0,
                    .values = 0,
                    .indices = 0,
                    .partial = 0,
                    .largest = desc.largest ? 1 : 0,
                    .wide_indices = desc.index_dtype == DType::I64 ? 1 : 0};
}

}  // namespace kiln::cuda
