// Defaults of indexing: select_assign through scatter, the n-d forms through flat indices, and
// argwhere on the host (a data-dependent output size).
#include "contract/defaults/compose.h"

namespace kiln {

using namespace defaults;

Primitive Backend::select_assign(Primitive x, std::int64_t dim, Primitive indices, Primitive values,
                                 IndexingUpdate update) {
  // indices [k] become [1, .., k, .., 1] expanded to the shape of values, so scatter writes
  // values[..., j, ...] at x[..., indices[j], ...] for every update mode.
  const Shape& values_shape = values->shape();
  Shape index_shape = ones_shape(values_shape.rank());
  index_shape[static_cast<std::size_t>(dim)] = indices->shape().num_elements();
  Primitive spread = expand_to(*this, reshape(std::move(indices), index_shape), values_shape);
  return scatter(dim, std::move(x), std::move(spread), std::move(values), update);
}

namespace {

// The row-major flat position of each index tuple (the last dim of indices) within the first
// m dims of shape, as i64 of shape [rows].
Primitive flat_indices(Backend& b, Primitive indices, const Shape& shape) {
  const Shape& index_shape = indices->shape();
  const std::size_t depth = static_cast<std::size_t>(index_shape[index_shape.rank() - 1]);
  std::int64_t rows = 1;
  for (std::size_t d = 0; d + 1 < index_shape.rank(); ++d) rows *= index_shape[d];
  Primitive table = b.reshape(b.cast(std::move(indices), DType::I64),
                              Shape{rows, static_cast<std::int64_t>(depth)});
  Primitive flat = b.zeros(Shape{rows, 1}, DType::I64, table->device());
  std::int64_t stride = 1;
  for (std::size_t j = depth; j-- > 0;) {
    Primitive column = slice_dim(b, table, 1, static_cast<std::int64_t>(j), 1);
    flat = b.add(std::move(flat), b.mul_scalar(std::move(column), stride));
    stride *= shape[j];
  }
  return b.reshape(std::move(flat), Shape{rows});
}

// shape with its first `depth` dims merged into one of their product.
Shape merge_leading(const Shape& shape, std::size_t depth) {
  detail::DimVector dims;
  std::int64_t merged = 1;
  for (std::size_t d = 0; d < depth; ++d) merged *= shape[d];
  dims.push_back(merged);
  for (std::size_t d = depth; d < shape.rank(); ++d) dims.push_back(shape[d]);
  return Shape(std::move(dims));
}

}  // namespace

Primitive Backend::gather_nd(Primitive x, Primitive indices) {
  // indices [..., m] pick x[i0, .., i(m-1)] (a slice of x's remaining dims) for each tuple.
  const Shape x_shape = x->shape();
  const Shape index_shape = indices->shape();
  const std::size_t depth = static_cast<std::size_t>(index_shape[index_shape.rank() - 1]);
  Primitive flat = flat_indices(*this, std::move(indices), x_shape);
  Primitive picked =
      select(reshape(std::move(x), merge_leading(x_shape, depth)), 0, std::move(flat));
  detail::DimVector out_dims;
  for (std::size_t d = 0; d + 1 < index_shape.rank(); ++d) out_dims.push_back(index_shape[d]);
  for (std::size_t d = depth; d < x_shape.rank(); ++d) out_dims.push_back(x_shape[d]);
  return reshape(std::move(picked), Shape(std::move(out_dims)));
}

Primitive Backend::scatter_nd(Primitive x, Primitive indices, Primitive values,
                              IndexingUpdate update) {
  const Shape x_shape = x->shape();
  const Shape index_shape = indices->shape();
  const std::size_t depth = static_cast<std::size_t>(index_shape[index_shape.rank() - 1]);
  Primitive flat = flat_indices(*this, std::move(indices), x_shape);
  Shape rows_shape = merge_leading(x_shape, depth);
  rows_shape[0] = flat->shape()[0];
  Primitive rows = reshape(std::move(values), rows_shape);
  Primitive merged = reshape(std::move(x), merge_leading(x_shape, depth));
  return reshape(select_assign(std::move(merged), 0, std::move(flat), std::move(rows), update),
                 x_shape);
}

Primitive Backend::mask_select(Primitive x, Primitive mask) {
  // The elements of x where mask (broadcast to x) is true, in row-major order, as a 1-D tensor.
  const Shape shape = broadcast(x->shape(), mask->shape());
  const std::int64_t n = shape.num_elements();
  Primitive flat_mask = reshape(expand_to(*this, std::move(mask), shape), Shape{n});
  Primitive flat_x = reshape(expand_to(*this, std::move(x), shape), Shape{n});
  Primitive positions = argwhere(std::move(flat_mask), DType::I64);
  const std::int64_t count = positions->shape()[0];
  return select(std::move(flat_x), 0, reshape(std::move(positions), Shape{count}));
}

Primitive Backend::argwhere(Primitive mask, DType index_dtype) {
  // The coordinates [count, rank] of the true elements, in row-major order, found on the host.
  const Device device = mask->device();
  const TensorData data = into_data(std::move(mask)).get();
  const Shape& shape = data.shape();
  const std::size_t rank = shape.rank();
  const auto bytes = data.bytes();
  std::vector<std::int64_t> coords;
  std::vector<std::int64_t> index(rank, 0);
  const std::int64_t n = shape.num_elements();
  for (std::int64_t flat = 0; flat < n; ++flat) {
    if (bytes[static_cast<std::size_t>(flat)] != std::byte{0}) {
      coords.insert(coords.end(), index.begin(), index.end());
    }
    for (std::size_t d = rank; d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  const std::int64_t count = rank == 0 ? 0 : static_cast<std::int64_t>(coords.size() / rank);
  TensorData out = TensorData::from_vec(coords, Shape{count, static_cast<std::int64_t>(rank)});
  return from_data(index_dtype == DType::I64 ? std::move(out) : out.convert(index_dtype), device);
}

}  // namespace kiln
