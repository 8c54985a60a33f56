// Layout ops as O(1) views (reshape when the strides allow, expand, permute, flip, unfold,
// slice), the strided copy that makes a view contiguous, and slice_assign.
#include <optional>

#include "backends/cuda/elementwise_ops.h"

namespace kiln::cuda {

namespace {

// Strides viewing x's memory with shape, when every group of old dims that merges into new
// dims is contiguous within itself (else a copy is needed).
std::optional<Strides> view_strides(const CudaTensor& x, const Shape& shape) {
  if (x.shape().num_elements() == 0) return contiguous_strides(shape);
  // Old dims as (size, stride) without size-1 dims, merged where contiguous.
  std::vector<std::pair<std::int64_t, std::int64_t>> chunks;
  for (std::size_t d = 0; d < x.rank(); ++d) {
    const std::int64_t size = x.shape()[d], stride = x.strides()[d];
    if (size == 1) continue;
    if (!chunks.empty() && chunks.back().second == stride * size) {
      chunks.back() = {chunks.back().first * size, stride};
    } else {
      chunks.emplace_back(size, stride);
    }
  }
  // Each chunk must be split exactly by consecutive new dims (size-1 new dims take any stride).
  Strides out(shape.rank(), 1);
  std::size_t d = 0;
  for (const auto& [size, stride] : chunks) {
    std::int64_t remaining = size;
    std::vector<std::size_t> dims;
    while (d < shape.rank() && remaining > 1) {
      if (shape[d] != 1) {
        if (remaining % shape[d] != 0) return std::nullopt;
        remaining /= shape[d];
      }
      dims.push_back(d++);
    }
    if (remaining != 1) return std::nullopt;
    std::int64_t step = stride;
    for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
      out[*it] = step;
      step *= shape[*it];
    }
  }
  for (; d < shape.rank(); ++d) {
    if (shape[d] != 1) return std::nullopt;
  }
  return out;
}

}  // namespace

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
  if (auto strides = view_strides(t, shape)) return make_view(t, std::move(shape), std::move(*strides), t.offset());
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
  const CudaTensor& t = as_cuda(x);
  detail::DimVector dims(axes.size());
  Strides strides(axes.size());
  for (std::size_t i = 0; i < axes.size(); ++i) {
    dims[i] = t.shape()[static_cast<std::size_t>(axes[i])];
    strides[i] = t.strides()[static_cast<std::size_t>(axes[i])];
  }
  return make_view(t, Shape(std::move(dims)), std::move(strides), t.offset());
}

Primitive CudaBackend::swap_dims(Primitive x, std::int64_t dim1, std::int64_t dim2) {
  Axes axes(x->rank());
  for (std::size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<std::int64_t>(i);
  std::swap(axes[static_cast<std::size_t>(dim1)], axes[static_cast<std::size_t>(dim2)]);
  return permute(std::move(x), std::move(axes));
}

Primitive CudaBackend::flip(Primitive x, Axes axes) {
  const CudaTensor& t = as_cuda(x);
  Strides strides = t.strides();
  std::int64_t offset = t.offset();
  for (std::int64_t a : axes) {
    const std::size_t d = static_cast<std::size_t>(a);
    if (t.shape()[d] > 0) offset += (t.shape()[d] - 1) * strides[d];
    strides[d] = -strides[d];
  }
  return make_view(t, t.shape(), std::move(strides), offset);
}

Primitive CudaBackend::unfold(Primitive x, std::int64_t dim, std::int64_t size, std::int64_t step) {
  const CudaTensor& t = as_cuda(x);
  const std::size_t d = static_cast<std::size_t>(dim);
  detail::DimVector dims(t.shape().vector());
  Strides strides = t.strides();
  const std::int64_t windows = t.shape()[d] >= size ? (t.shape()[d] - size) / step + 1 : 0;
  dims[d] = windows;
  const std::int64_t stride = strides[d];
  strides[d] = stride * step;
  dims.push_back(size);
  strides.push_back(stride);
  return make_view(t, Shape(std::move(dims)), std::move(strides), t.offset());
}

Primitive CudaBackend::slice(Primitive x, ResolvedSlices slices) {
  const CudaTensor& t = as_cuda(x);
  detail::DimVector dims(t.shape().vector());
  Strides strides = t.strides();
  std::int64_t offset = t.offset();
  for (std::size_t d = 0; d < slices.size(); ++d) {
    const ResolvedSlice& s = slices[d];
    if (s.length > 0) offset += s.start * strides[d];
    dims[d] = s.length;
    strides[d] *= s.step;
  }
  return make_view(t, Shape(std::move(dims)), std::move(strides), offset);
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
