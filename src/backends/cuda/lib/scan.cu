// Row scans: validation and the split between the sum/product and min/max translation units.
#include <limits>

#include "backends/cuda/lib/scan.h"
#include "backends/cuda/lib/scan_kernels.cuh"

namespace kiln::cuda::lib {

namespace {

bool is_sum_or_prod(ScanOp op) { return op == ScanOp::Sum || op == ScanOp::Prod; }

}  // namespace

void validate(const ScanDesc& desc) {
  if (desc.rows < 0 || desc.n < 0) {
    detail::fail<InvalidArgument>("scan", "rows ", desc.rows, " and n ", desc.n,
                                  " must not be negative");
  }
  if (desc.n > 0 && desc.rows > std::numeric_limits<std::int64_t>::max() / desc.n) {
    detail::fail<InvalidArgument>("scan", "rows ", desc.rows, " x n ", desc.n, " overflows");
  }
  if (desc.op != ScanOp::Sum && desc.op != ScanOp::Prod && desc.op != ScanOp::Min &&
      desc.op != ScanOp::Max) {
    detail::fail<InvalidArgument>("scan", "unknown scan op ", static_cast<int>(desc.op));
  }
  scan_detail::visit_dtype(desc.dtype, [](auto) {});  // rejects Bool and QFloat
}

std::size_t scan_workspace_bytes(const ScanDesc& desc) {
  validate(desc);
  if (desc.rows == 0 || desc.n == 0) return 0;
  return is_sum_or_prod(desc.op) ? scan_detail::sum_prod_workspace(desc)
                                 : scan_detail::min_max_workspace(desc);
}

void scan_rows(const ScanDesc& desc, const void* input, void* output, void* workspace,
               std::size_t workspace_bytes, cudaStream_t stream) {
  validate(desc);
  if (desc.rows == 0 || desc.n == 0) return;
  if (is_sum_or_prod(desc.op)) {
    scan_detail::sum_prod(desc, input, output, workspace, workspace_bytes, stream);
  } else {
    scan_detail::min_max(desc, input, output, workspace, workspace_bytes, stream);
  }
}

}  // namespace kiln::cuda::lib
