// cummin and cummax: the scan kernels instantiated for their two ops and every dtype.
#include "backends/cuda/lib/scan_kernels.cuh"

namespace kiln::cuda::lib::scan_detail {

std::size_t min_max_workspace(const ScanDesc& desc) {
  return visit_dtype(desc.dtype, [&]<class Tag>(Tag) {
    using T = typename Tag::type;
    return desc.op == ScanOp::Min ? workspace_bytes<T, ScanOp::Min>(desc)
                                  : workspace_bytes<T, ScanOp::Max>(desc);
  });
}

void min_max(const ScanDesc& desc, const void* input, void* output, void* workspace,
             std::size_t bytes, cudaStream_t stream) {
  visit_dtype(desc.dtype, [&]<class Tag>(Tag) {
    using T = typename Tag::type;
    if (desc.op == ScanOp::Min) {
      run<T, ScanOp::Min>(desc, input, output, workspace, bytes, stream);
    } else {
      run<T, ScanOp::Max>(desc, input, output, workspace, bytes, stream);
    }
  });
}

}  // namespace kiln::cuda::lib::scan_detail
