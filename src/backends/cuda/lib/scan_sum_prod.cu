// cumsum and cumprod: the scan kernels instantiated for their two ops and every dtype.
#include "backends/cuda/lib/scan_kernels.cuh"

namespace kiln::cuda::lib::scan_detail {

std::size_t sum_prod_workspace(const ScanDesc& desc) {
  return visit_dtype(desc.dtype, [&]<class Tag>(Tag) {
    using T = typename Tag::type;
    return desc.op == ScanOp::Sum ? workspace_bytes<T, ScanOp::Sum>(desc)
                                  : workspace_bytes<T, ScanOp::Prod>(desc);
  });
}

void sum_prod(const ScanDesc& desc, const void* input, void* output, void* workspace,
              std::size_t bytes, cudaStream_t stream) {
  visit_dtype(desc.dtype, [&]<class Tag>(Tag) {
    using T = typename Tag::type;
    if (desc.op == ScanOp::Sum) {
      run<T, ScanOp::Sum>(desc, input, output, workspace, bytes, stream);
    } else {
      run<T, ScanOp::Prod>(desc, input, output, workspace, bytes, stream);
    }
  });
}

}  // namespace kiln::cuda::lib::scan_detail
