// The strided copy that makes a view contiguous, and StridedBackend's hooks: the layout ops
// themselves (views, and copies where a view cannot do) are written once for the CPU and CUDA
// backends in src/contract/strided_backend.cpp.
#include "backends/cuda/elementwise_ops.h"
#include "backends/cuda/kernel_capture.h"

namespace kiln::cuda {

void CudaBackend::copy_into(const CudaTensor& dst, const CudaTensor& src, const char* op) {
  const DType raw = raw_dtype(src.dtype());
  ElementwiseOp spec{op, "a", {raw}, raw, raw, {}, nullptr};
  spec.name = "copy";
  const CudaTensor* inputs[] = {&src};
  launch_elementwise(runtime_, spec, dst, inputs);
}

TensorPtr CudaBackend::contiguous(const Primitive& x, const char* op) {
  const CudaTensor& t = as_cuda(x);
  if (t.is_contiguous()) return std::static_pointer_cast<CudaTensor>(x);
  return std::static_pointer_cast<CudaTensor>(contiguous_copy(t, op));
}

Primitive CudaBackend::view_on(const StridedTensor& base, strided::View view) {
  // A placeholder of a kernel capture has no storage to view: an op that permutes or reshapes its
  // input first (a scan along an inner dim) cannot be a fused kernel's step or tail.
  if (static_cast<const CudaTensor&>(base).storage() == nullptr) KernelCapture::refuse_if_active();
  return make_view(static_cast<const CudaTensor&>(base), std::move(view.shape),
                   std::move(view.strides), view.offset);
}

Primitive CudaBackend::contiguous_copy(const StridedTensor& x, const char* op) {
  TensorPtr out = make_tensor(x.dtype(), x.shape(), op);
  copy_into(*out, static_cast<const CudaTensor&>(x), op);
  return out;
}

void CudaBackend::copy_elements(StridedTensor& dst, const StridedTensor& src, const char* op) {
  copy_into(static_cast<const CudaTensor&>(dst), static_cast<const CudaTensor&>(src), op);
}

}  // namespace kiln::cuda
