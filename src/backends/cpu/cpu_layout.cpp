// Layout ops as O(1) views: reshape (when strides allow), expand, permute, flip, unfold, slice.
#include <optional>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_tensor.h"
#include "contract/strided.h"

namespace kiln {

using namespace cpu;

Primitive CpuBackend::reshape(Primitive x, Shape shape) {
  const CpuTensor& t = as_cpu(x);
  if (t.shape() == shape) return x;
  if (auto strides = strided::reshape_strides(t.shape(), t.strides(), shape)) {
    return make_view(t, std::move(shape), std::move(*strides), t.offset());
  }
  auto c = copy(t);
  // The strides first: arguments are evaluated in an unspecified order, and clang moves shape
  // into the first parameter before contiguous_strides would read it.
  Strides strides = contiguous_strides(shape);
  return make_view(*c, std::move(shape), std::move(strides), 0);
}

Primitive CpuBackend::expand(Primitive x, Shape shape) {
  const CpuTensor& t = as_cpu(x);
  if (t.shape() == shape) return x;
  return make_view(t, shape, broadcast_strides(t, shape), t.offset());
}

Primitive CpuBackend::permute(Primitive x, Axes axes) {
  const auto& t = as_cpu(x);
  strided::View v = strided::permute(t.shape(), t.strides(), t.offset(), axes);
  return make_view(t, std::move(v.shape), std::move(v.strides), v.offset);
}

Primitive CpuBackend::swap_dims(Primitive x, std::int64_t dim1, std::int64_t dim2) {
  Axes axes(x->rank());
  for (std::size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<std::int64_t>(i);
  std::swap(axes[static_cast<std::size_t>(dim1)], axes[static_cast<std::size_t>(dim2)]);
  return permute(std::move(x), std::move(axes));
}

Primitive CpuBackend::flip(Primitive x, Axes axes) {
  const auto& t = as_cpu(x);
  strided::View v = strided::flip(t.shape(), t.strides(), t.offset(), axes);
  return make_view(t, std::move(v.shape), std::move(v.strides), v.offset);
}

Primitive CpuBackend::unfold(Primitive x, std::int64_t dim, std::int64_t size, std::int64_t step) {
  const auto& t = as_cpu(x);
  strided::View v = strided::unfold(t.shape(), t.strides(), t.offset(), dim, size, step);
  return make_view(t, std::move(v.shape), std::move(v.strides), v.offset);
}

Primitive CpuBackend::slice(Primitive x, ResolvedSlices slices) {
  const auto& t = as_cpu(x);
  strided::View v = strided::slice(t.shape(), t.strides(), t.offset(), slices);
  return make_view(t, std::move(v.shape), std::move(v.strides), v.offset);
}

}  // namespace kiln
