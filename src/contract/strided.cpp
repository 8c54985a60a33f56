#include "contract/strided.h"

#include <algorithm>

#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::strided {

Strides contiguous_strides(const Shape& shape) {
  // A copy of the dims overwritten in place: one fixed-size copy instead of a resize loop
  // (every fresh tensor of every backend comes here).
  Strides strides = shape.vector();
  std::int64_t stride = 1;
  for (std::size_t i = strides.size(); i-- > 0;) {
    const std::int64_t size = strides[i];
    strides[i] = stride;
    stride *= size;
  }
  return strides;
}

bool is_contiguous(const Shape& shape, const Strides& strides) noexcept {
  std::int64_t expected = 1;
  for (std::size_t i = shape.rank(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

Strides broadcast_strides(const Shape& shape, const Strides& strides, const Shape& to) {
  Strides out(to.rank(), 0);
  const std::size_t lead = to.rank() - shape.rank();
  for (std::size_t i = 0; i < shape.rank(); ++i) {
    out[lead + i] = shape[i] == 1 && to[lead + i] != 1 ? 0 : strides[i];
  }
  return out;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  if (a == b) return a;
  const std::size_t rank = std::max(a.rank(), b.rank());
  detail::DimVector out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t da = i < rank - a.rank() ? 1 : a[i - (rank - a.rank())];
    const std::int64_t db = i < rank - b.rank() ? 1 : b[i - (rank - b.rank())];
    if (da != db && da != 1 && db != 1) {
      detail::fail<ShapeMismatch>(op, "shapes ", a.to_string(), " and ", b.to_string(),
                                  " cannot be broadcast (dim ", i, ": ", da, " vs ", db, ")");
    }
    out[i] = da == 1 ? db : da;
  }
  return Shape(std::move(out));
}

// PyTorch's rule, walked from the last dim: old dims are grouped into chunks that are contiguous
// within themselves, and each chunk must be covered exactly by a run of new dims.
std::optional<Strides> reshape_strides(const Shape& shape, const Strides& strides,
                                       const Shape& to) {
  Strides out(to.rank());
  if (shape.num_elements() == 0) return contiguous_strides(to);
  std::int64_t view_d = static_cast<std::int64_t>(to.rank()) - 1;
  std::int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  std::int64_t tensor_numel = 1;
  std::int64_t view_numel = 1;
  for (std::int64_t tensor_d = static_cast<std::int64_t>(shape.rank()) - 1; tensor_d >= 0;
       --tensor_d) {
    tensor_numel *= shape[tensor_d];
    if (tensor_d == 0 ||
        (shape[tensor_d - 1] != 1 && strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || to[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= to[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

void check_view_in_storage(const Shape& shape, const Strides& strides, std::int64_t offset,
                           std::int64_t storage_elements, const char* op) {
  // The lowest and highest element offsets the view reaches, in 128 bits: a corrupt view must
  // not be able to hide behind a wrapped sum.
  __int128 low = offset, high = offset;
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    if (shape[d] < 0) {
      detail::fail<InvalidArgument>(op, "view of shape ", shape.to_string(), " has a negative dim");
    }
    if (shape[d] == 0) return;  // no elements, nothing to reach
    const __int128 reach = static_cast<__int128>(shape[d] - 1) * strides[d];
    (reach < 0 ? low : high) += reach;
  }
  if (low < 0 || high >= storage_elements) {
    detail::fail<InvalidArgument>(op, "view of shape ", shape.to_string(), " at offset ", offset,
                                  " reaches elements [", static_cast<double>(low), ", ",
                                  static_cast<double>(high), "] outside its storage of ",
                                  storage_elements, " elements");
  }
}

View permute(const Shape& shape, const Strides& strides, std::int64_t offset,
             std::span<const std::int64_t> axes) {
  detail::DimVector dims(axes.size());
  Strides out(axes.size());
  for (std::size_t i = 0; i < axes.size(); ++i) {
    dims[i] = shape[static_cast<std::size_t>(axes[i])];
    out[i] = strides[static_cast<std::size_t>(axes[i])];
  }
  return {Shape(std::move(dims)), std::move(out), offset};
}

View flip(const Shape& shape, const Strides& strides, std::int64_t offset,
          std::span<const std::int64_t> axes) {
  Strides out = strides;
  for (std::int64_t a : axes) {
    const std::size_t d = static_cast<std::size_t>(a);
    if (shape[d] > 0) offset += (shape[d] - 1) * out[d];
    out[d] = -out[d];
  }
  return {shape, std::move(out), offset};
}

View unfold(const Shape& shape, const Strides& strides, std::int64_t offset, std::int64_t dim,
            std::int64_t size, std::int64_t step) {
  const std::size_t d = static_cast<std::size_t>(dim);
  detail::DimVector dims(shape.vector());
  Strides out = strides;
  dims[d] = shape[d] >= size ? (shape[d] - size) / step + 1 : 0;
  const std::int64_t stride = out[d];
  // With one window the step is never taken (and may be as large as int64 allows); with more,
  // (windows - 1) * step < size of the dim, so the product fits.
  if (dims[d] > 1) out[d] = stride * step;
  dims.push_back(size);
  out.push_back(stride);
  return {Shape(std::move(dims)), std::move(out), offset};
}

View slice(const Shape& shape, const Strides& strides, std::int64_t offset,
           std::span<const ResolvedSlice> slices) {
  detail::DimVector dims(shape.vector());
  Strides out = strides;
  for (std::size_t d = 0; d < slices.size(); ++d) {
    const ResolvedSlice& s = slices[d];
    if (s.length > 0) offset += s.start * out[d];
    dims[d] = s.length;
    // A step is only taken between two visited indices; then |step| < size of the dim.
    if (s.length > 1) out[d] *= s.step;
  }
  return {Shape(std::move(dims)), std::move(out), offset};
}

}  // namespace kiln::strided
