// Defaults of layout ops: swap_dims as a permutation, cat by assigning slices of an empty
// result, repeat_dim by broadcasting along a new leading axis.
#include <numeric>

#include "contract/defaults/compose.h"

namespace kiln {

using namespace defaults;

Primitive Backend::swap_dims(Primitive x, std::int64_t dim1, std::int64_t dim2) {
  Axes axes(x->rank());
  std::iota(axes.begin(), axes.end(), std::int64_t{0});
  std::swap(axes[static_cast<std::size_t>(dim1)], axes[static_cast<std::size_t>(dim2)]);
  return permute(std::move(x), std::move(axes));
}

Primitive Backend::cat(PrimitiveList xs, std::int64_t dim) {
  if (xs.size() == 1) return std::move(xs.front());
  const std::size_t d = static_cast<std::size_t>(dim);
  Shape shape = xs.front()->shape();
  shape[d] = 0;
  for (const Primitive& x : xs) shape[d] += x->shape()[d];
  Primitive out = empty(shape, xs.front()->dtype(), xs.front()->device());
  if (shape.num_elements() == 0) return out;
  std::int64_t offset = 0;
  for (Primitive& x : xs) {
    const std::int64_t size = x->shape()[d];
    if (size == 0) continue;
    ResolvedSlices slices = full_slices(shape);
    slices[d] = {offset, size, 1};
    out = slice_assign(std::move(out), std::move(slices), std::move(x));
    offset += size;
  }
  return out;
}

Primitive Backend::repeat_dim(Primitive x, std::int64_t dim, std::int64_t times) {
  // [.., n, ..] -> [.., 1, n, ..] -> expand [.., times, n, ..] -> [.., times * n, ..]
  const std::size_t d = static_cast<std::size_t>(dim);
  const Shape shape = x->shape();
  detail::DimVector with_axis(shape.vector());
  with_axis.insert(d, 1);
  Primitive lifted = reshape(std::move(x), Shape(with_axis));
  with_axis[d] = times;
  Primitive spread = expand(std::move(lifted), Shape(with_axis));
  return reshape(std::move(spread), with_dim(shape, dim, shape[d] * times));
}

}  // namespace kiln
