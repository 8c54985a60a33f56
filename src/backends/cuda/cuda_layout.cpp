// Layout ops as O(1) views (reshape when the strides allow, expand, permute, flip, unfold,
// slice), the strided copy that makes a view contiguous, and slice_assign.
#include <optional>

#include "backends/cuda/elementwise_ops.h"
#include "contract/strided.h"

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
  TensorPtr out = make_tensor(t.dtype(), t.shape(), op);
  copy_into(*out, t, op);
  return out;
}

Primitive CudaBackend::reshape(Primitive x, Shape shape) {
  const CudaTensor& t = as_cuda(x);
  if (t.shape() == shape) return x;
  if (auto strides = strided::reshape_strides(t.shape(), t.strides(), shape))
    return make_view(t, std::move(shape), std::move(*strides), t.offset());
  TensorPtr c = make_tensor(t.dtype(), t.shape(), "reshape");
  copy_into(*c, t, "reshape");
  return make_view(*c, shape, contiguous_strides(shape), 0);
}

Primitive CudaBackend::expand(Primitive x, Shape shape) {
  const CudaTensor& t = as_cuda(x);
  if (t.shape() == shape) return x;
  return make_view(t, shape, broadcast_strides(t, shape), t.offset());
}

Primitive CudaBackend::permute(Primitive x, Axes axes) {
  const auto& t = as_cuda(x);
  strided::View v = strided::permute(t.shape(), t.strides(), t.offset(), axes);
  return make_view(t, std::move(v.shape), std::move(v.strides), v.offset);
}

Primitive CudaBackend::swap_dims(Primitive x, std::int64_t dim1, std::int64_t dim2) {
  Axes axes(x->rank());
  for (std::size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<std::int64_t>(i);
  std::swap(axes[static_cast<std::size_t>(dim1)], axes[static_cast<std::size_t>(dim2)]);
  return permute(std::move(x), std::move(axes));
}

Primitive CudaBackend::flip(Primitive x, Axes axes) {
  const auto& t = as_cuda(x);
  strided::View v = strided::flip(t.shape(), t.strides(), t.offset(), axes);
  return make_view(t, std::move(v.shape), std::move(v.strides), v.offset);
}

Primitive CudaBackend::unfold(Primitive x, std::int64_t dim, std::int64_t size, std::int64_t step) {
  const auto& t = as_cuda(x);
  strided::View v = strided::unfold(t.shape(), t.strides(), t.offset(), dim, size, step);
  return make_view(t, std::move(v.shape), std::move(v.strides), v.offset);
}

Primitive CudaBackend::slice(Primitive x, ResolvedSlices slices) {
  const auto& t = as_cuda(x);
  strided::View v = strided::slice(t.shape(), t.strides(), t.offset(), slices);
  return make_view(t, std::move(v.shape), std::move(v.strides), v.offset);
}

Primitive CudaBackend::slice_assign(Primitive x, ResolvedSlices slices, Primitive values) {
  const char* op = "slice_assign";
  // Written in place when nobody else sees x (and it is laid out plainly), else into a copy.
  TensorPtr out;
  if (can_mut(x) && as_cuda(x).is_contiguous()) {
    out = std::static_pointer_cast<CudaTensor>(x);
  } else {
    out = make_tensor(x->dtype(), x->shape(), op);
    copy_into(*out, as_cuda(x), op);
  }
  Primitive region = slice(out, std::move(slices));
  if (region->shape().num_elements() > 0) copy_into(as_cuda(region), as_cuda(values), op);
  return out;
}

}  // namespace kiln::cuda
