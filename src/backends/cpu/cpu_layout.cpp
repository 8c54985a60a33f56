// Layout ops as O(1) views: reshape (when strides allow), expand, permute, flip, unfold, slice.
#include <optional>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_tensor.h"

namespace kiln {

using namespace cpu;

namespace {

// Strides that view x's memory with shape, if the existing strides allow it (PyTorch's rule:
// each group of old dims that merges into new dims must be contiguous within itself).
std::optional<Strides> view_strides(const CpuTensor& x, const Shape& shape) {
  const Shape& old_shape = x.shape();
  const Strides& old_strides = x.strides();
  Strides out(shape.rank());
  if (old_shape.num_elements() == 0) return contiguous_strides(shape);
  std::int64_t view_d = static_cast<std::int64_t>(shape.rank()) - 1;
  std::int64_t chunk_base_stride = old_strides.empty() ? 1 : old_strides.back();
  std::int64_t tensor_numel = 1;
  std::int64_t view_numel = 1;
  for (std::int64_t tensor_d = static_cast<std::int64_t>(old_shape.rank()) - 1; tensor_d >= 0;
       --tensor_d) {
    tensor_numel *= old_shape[tensor_d];
    if (tensor_d == 0 ||
        (old_shape[tensor_d - 1] != 1 &&
         old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

}  // namespace

Primitive CpuBackend::reshape(Primitive x, Shape shape) {
  const CpuTensor& t = as_cpu(x);
  if (t.shape() == shape) return x;
  if (auto strides = view_strides(t, shape)) {
    return make_view(t, std::move(shape), std::move(*strides), t.offset());
  }
  auto c = copy(t);
  return make_view(*c, std::move(shape), contiguous_strides(shape), 0);
}

Primitive CpuBackend::expand(Primitive x, Shape shape) {
  const CpuTensor& t = as_cpu(x);
  if (t.shape() == shape) return x;
  return make_view(t, shape, broadcast_strides(t, shape), t.offset());
}

Primitive CpuBackend::permute(Primitive x, Axes axes) {
  const CpuTensor& t = as_cpu(x);
  detail::DimVector dims(axes.size());
  Strides strides(axes.size());
  for (std::size_t i = 0; i < axes.size(); ++i) {
    dims[i] = t.shape()[static_cast<std::size_t>(axes[i])];
    strides[i] = t.strides()[static_cast<std::size_t>(axes[i])];
  }
  return make_view(t, Shape(std::move(dims)), std::move(strides), t.offset());
}

Primitive CpuBackend::swap_dims(Primitive x, std::int64_t dim1, std::int64_t dim2) {
  Axes axes(x->rank());
  for (std::size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<std::int64_t>(i);
  std::swap(axes[static_cast<std::size_t>(dim1)], axes[static_cast<std::size_t>(dim2)]);
  return permute(std::move(x), std::move(axes));
}

Primitive CpuBackend::flip(Primitive x, Axes axes) {
  const CpuTensor& t = as_cpu(x);
  Strides strides = t.strides();
  std::int64_t offset = t.offset();
  for (std::int64_t a : axes) {
    const std::size_t d = static_cast<std::size_t>(a);
    if (t.shape()[d] > 0) offset += (t.shape()[d] - 1) * strides[d];
    strides[d] = -strides[d];
  }
  return make_view(t, t.shape(), std::move(strides), offset);
}

Primitive CpuBackend::unfold(Primitive x, std::int64_t dim, std::int64_t size, std::int64_t step) {
  const CpuTensor& t = as_cpu(x);
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

Primitive CpuBackend::slice(Primitive x, ResolvedSlices slices) {
  const CpuTensor& t = as_cpu(x);
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

}  // namespace kiln
