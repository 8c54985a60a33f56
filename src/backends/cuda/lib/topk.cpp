// Selection topk: validation, the plan, and dispatch from dtype to key width and kind.
#include "backends/cuda/lib/topk.h"

#include <limits>

#include "backends/cuda/lib/topk_detail.h"
#include "backends/cuda/lib/workspace.h"

namespace kiln::cuda::lib {

bool topk_selects(const TopkDesc& desc) { return desc.k <= max_select_k(desc.dtype); }

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
  visit_key_type(desc.dtype, op, [](auto) {});  // rejects Bool and QFloat
  if (desc.k < 0 || desc.k > desc.n || desc.k > max_select_k(desc.dtype)) {
    detail::fail<InvalidArgument>(op, "k = ", desc.k, " must be in [0, min(n = ", desc.n, ", ",
                                  max_select_k(desc.dtype), ")] for ", dtype_name(desc.dtype));
  }
  if (desc.index_dtype != DType::I64 && desc.index_dtype != DType::I32) {
    detail::fail<InvalidArgument>(op, "index dtype must be i64 or i32, got ",
                                  dtype_name(desc.index_dtype));
  }
}

std::size_t topk_workspace_bytes(const TopkDesc& desc) {
  validate(desc);
  if (desc.rows == 0 || desc.k == 0) return 0;
  const topk_detail::TopkPlan plan = topk_detail::plan_topk(desc);
  if (plan.segments == 1) return 0;
  return align_up(static_cast<std::size_t>(desc.rows * plan.segments * plan.list) *
                  topk_detail::candidate_bytes(desc.dtype));
}

void topk_rows(const TopkDesc& desc, const void* input, void* values, void* indices,
               void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  const std::size_t needed = topk_workspace_bytes(desc);  // validates desc
  if (desc.rows == 0 || desc.k == 0) return;              // empty outputs may be null
  if (input == nullptr || values == nullptr || indices == nullptr) {
    detail::fail<InvalidArgument>("topk", "input, values and indices must all be given");
  }
  if (workspace_bytes < needed || (needed > 0 && workspace == nullptr)) {
    detail::fail<InvalidArgument>("topk", "workspace of ", workspace_bytes, " bytes, need ",
                                  needed);
  }
  const topk_detail::TopkPlan plan = topk_detail::plan_topk(desc);
  visit_key_type(desc.dtype, "topk", [&]<class Key>(Key) {
    topk_detail::topk_typed<typename Key::Bits, Key::kind>(desc, plan, input, values, indices,
                                                           workspace, stream);
  });
}

}  // namespace kiln::cuda::lib
