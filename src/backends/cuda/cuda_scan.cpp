// cumsum, cumprod, cummin, cummax on the GPU through the generated row scans of scan.h, for every
// float and integer dtype, with the CPU backend's semantics (float sums and products in double,
// integers wrapping, NaN kept once seen by cummin/cummax). The dim is moved last and the input
// made contiguous (a strided copy only when it is not already), the rows are scanned, and the
// result is viewed with the dim back in its place.
#include "backends/cuda/lib_call.h"
#include "backends/cuda/scan.h"

namespace kiln::cuda {

namespace {

Primitive run_scan(CudaBackend& b, Primitive x, std::int64_t dim, ScanOp scan, const char* op) {
  const std::size_t rank = x->rank();
  const bool last = dim == static_cast<std::int64_t>(rank) - 1;
  Primitive moved = last ? x : b.permute(x, dim_last_axes(rank, dim));
  TensorPtr in = b.contiguous(moved, op);
  // A copy made here is ours: scan it in place. Otherwise write a fresh tensor.
  const bool fresh = in->storage() != as_cuda(x).storage();
  TensorPtr out = fresh ? in : b.make_tensor(in->dtype(), in->shape(), op);

  const Shape& shape = in->shape();
  ScanDesc desc{.dtype = in->dtype(), .rows = 1, .n = shape[rank - 1], .op = scan};
  for (std::size_t d = 0; d + 1 < rank; ++d) desc.rows *= shape[d];
  const ScanPlan plan = plan_scan(desc);  // validates desc
  Runtime& runtime = b.runtime();
  Workspace workspace(runtime, plan.workspace_bytes, op);
  ScanParams p = plan.params;
  p.in = in->data();
  p.out = out->data();
  p.partials = workspace.pointer();
  for (const ScanLaunch& launch : plan.launches) {
    CUfunction function = runtime.compiler.function(
        scan_kernel_key(launch.kernel, scan, desc.dtype), scan_kernel_name(launch.kernel),
        [&] { return scan_kernel_source(launch.kernel, scan, desc.dtype); });
    runtime.launch(op, function, launch.blocks, kScanBlock, p);
  }
  if (last) return out;
  return b.permute(out, dim_back_axes(rank, dim));
}

}  // namespace

Primitive CudaBackend::cumsum(Primitive x, std::int64_t dim) {
  return run_scan(*this, std::move(x), dim, ScanOp::Sum, "cumsum");
}
Primitive CudaBackend::cumprod(Primitive x, std::int64_t dim) {
  return run_scan(*this, std::move(x), dim, ScanOp::Prod, "cumprod");
}
Primitive CudaBackend::cummin(Primitive x, std::int64_t dim) {
  return run_scan(*this, std::move(x), dim, ScanOp::Min, "cummin");
}
Primitive CudaBackend::cummax(Primitive x, std::int64_t dim) {
  return run_scan(*this, std::move(x), dim, ScanOp::Max, "cummax");
}

}  // namespace kiln::cuda
