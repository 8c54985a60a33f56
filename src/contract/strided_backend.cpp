// The layout ops of the strided backends, in terms of their hooks; the window arithmetic itself is
// strided.cpp's.
#include "contract/strided_backend.h"

#include <optional>

#include "contract/fused_program.h"

namespace kiln {

Primitive StridedBackend::reshape(Primitive x, Shape shape) {
  const StridedTensor& t = as_strided(x);
  if (t.shape() == shape) return x;
  if (auto strides = strided::reshape_strides(t.shape(), t.strides(), shape))
    return view_on(t, {std::move(shape), std::move(*strides), t.offset()});
  // No strides express the new shape over x's window: a contiguous copy does. The strides are
  // computed first: the braced list below moves shape before any later element would read it.
  Primitive dense = contiguous_copy(t, "reshape");
  strided::Strides strides = contiguous_strides(shape);
  return view_on(as_strided(dense), {std::move(shape), std::move(strides), 0});
}

Primitive StridedBackend::expand(Primitive x, Shape shape) {
  const StridedTensor& t = as_strided(x);
  if (t.shape() == shape) return x;
  strided::Strides strides = broadcast_strides(t, shape);
  return view_on(t, {std::move(shape), std::move(strides), t.offset()});
}

Primitive StridedBackend::permute(Primitive x, Axes axes) {
  if (x->dtype() == DType::QFloat) [[unlikely]]
    return permute_quantized(std::move(x), std::move(axes));
  const StridedTensor& t = as_strided(x);
  return view_on(t, strided::permute(t.shape(), t.strides(), t.offset(), axes));
}

Primitive StridedBackend::swap_dims(Primitive x, std::int64_t dim1, std::int64_t dim2) {
  Axes axes(x->rank());
  for (std::size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<std::int64_t>(i);
  std::swap(axes[static_cast<std::size_t>(dim1)], axes[static_cast<std::size_t>(dim2)]);
  return StridedBackend::permute(std::move(x), std::move(axes));
}

Primitive StridedBackend::flip(Primitive x, Axes axes) {
  const StridedTensor& t = as_strided(x);
  return view_on(t, strided::flip(t.shape(), t.strides(), t.offset(), axes));
}

Primitive StridedBackend::unfold(Primitive x, std::int64_t dim, std::int64_t size,
                                 std::int64_t step) {
  const StridedTensor& t = as_strided(x);
  return view_on(t, strided::unfold(t.shape(), t.strides(), t.offset(), dim, size, step));
}

Primitive StridedBackend::slice(Primitive x, ResolvedSlices slices) {
  if (x->dtype() == DType::QFloat) [[unlikely]]
    return slice_quantized(std::move(x), std::move(slices));
  const StridedTensor& t = as_strided(x);
  return view_on(t, strided::slice(t.shape(), t.strides(), t.offset(), slices));
}

Primitive StridedBackend::slice_assign(Primitive x, ResolvedSlices slices, Primitive values) {
  const char* op = "slice_assign";
  // Written in place when nobody else sees x (and it is laid out plainly), else into a copy.
  Primitive out;
  if (can_mut(x) && as_strided(x).is_contiguous()) {
    out = std::move(x);
  } else {
    out = contiguous_copy(as_strided(x), op);
    x.reset();
  }
  Primitive region = StridedBackend::slice(out, std::move(slices));
  if (region->shape().num_elements() > 0) copy_elements(as_strided(region), as_strided(values), op);
  return out;
}

Primitive StridedBackend::permute_quantized(Primitive, Axes) {
  detail::fail<UnsupportedDType>("permute", name(), " cannot store qfloat tensors");
}

Primitive StridedBackend::slice_quantized(Primitive, ResolvedSlices) {
  detail::fail<UnsupportedDType>("slice", name(), " cannot store qfloat tensors");
}

void StridedBackend::assign(const Primitive& dst, Primitive src) {
  const char* op = "assign";
  StridedTensor& to = as_strided(dst);
  if (to.shape().num_elements() == 0) return;
  for (std::size_t d = 0; d < to.rank(); ++d) {
    if (to.shape()[d] > 1 && to.strides()[d] == 0) {
      detail::fail<InvalidArgument>(op, "cannot write into a view that repeats elements (shape ",
                                    to.shape().to_string(), ", stride 0 in dim ", d,
                                    "): an expanded tensor; assign into the tensor it expands");
    }
  }
  if (as_strided(src).storage_key() == to.storage_key()) {
    src = contiguous_copy(as_strided(src), op);
  }
  copy_elements(to, as_strided(src), op);
}

std::int32_t StridedBackend::writable_leaf(const FusedProgram& program, std::size_t k) noexcept {
  const std::int32_t leaf = program.leaf_for_output(k);
  if (leaf < 0) return -1;
  const FusedStep& step = program.steps[static_cast<std::size_t>(program.outputs[k])];
  const Primitive& leaf_tensor = program.leaves[static_cast<std::size_t>(leaf)];
  if (leaf_tensor->dtype() != step.dtype) return -1;
  const StridedTensor& into = as_strided(leaf_tensor);
  if (!into.is_contiguous() || into.shape() != step.shape) return -1;
  for (const Primitive& other : program.leaves) {
    if (other->dtype() == DType::QFloat) continue;  // blocks on storage of their own
    const StridedTensor& t = as_strided(other);
    if (&t == &into || t.storage_key() != into.storage_key()) continue;
    if (t.shape() != into.shape() || t.strides() != into.strides() || t.offset() != into.offset()) {
      return -1;
    }
  }
  return leaf;
}

}  // namespace kiln
