// Defaults of sorting, on the host: the fallback for backends without a sort kernel (it costs a
// read and an upload). Stable: equal values keep their order; NaN sorts above every number, as
// in PyTorch (last ascending, first descending). sort, argsort and topk are views of
// sort_with_indices, so a backend that overrides that one op speeds up all four.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "contract/defaults/compose.h"
#include "core/dtype_dispatch.h"

namespace kiln {

using namespace defaults;

namespace {

template <class C>
bool is_nan_value(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return v != v;
  } else {
    return false;
  }
}

}  // namespace

PrimitivePair Backend::sort_with_indices(Primitive x, std::int64_t dim, bool descending,
                                         DType index_dtype) {
  const Device device = x->device();
  const DType dtype = x->dtype();
  TensorData data = into_data(std::move(x)).get();
  const Shape shape = data.shape();
  const std::size_t d = static_cast<std::size_t>(dim);
  const std::int64_t length = shape[d];
  std::int64_t inner = 1;
  for (std::size_t k = d + 1; k < shape.rank(); ++k) inner *= shape[k];
  const std::int64_t outer = length * inner == 0 ? 0 : shape.num_elements() / (length * inner);
  std::vector<std::byte> sorted(data.bytes().size());
  std::vector<std::int64_t> positions(static_cast<std::size_t>(shape.num_elements()));
  visit_numeric_dtype(dtype, "sort", [&]<class T>(type_tag<T>) {
    using C = compute_t<T>;
    const T* in = reinterpret_cast<const T*>(data.bytes().data());
    T* out = reinterpret_cast<T*>(sorted.data());
    // a before b: a < b with NaN above everything, reversed for descending.
    auto less = [](C a, C b) { return !is_nan_value(a) && (is_nan_value(b) || a < b); };
    std::vector<std::int64_t> order(static_cast<std::size_t>(length));
    std::vector<C> line(static_cast<std::size_t>(length));
    for (std::int64_t o = 0; o < outer; ++o) {
      for (std::int64_t i = 0; i < inner; ++i) {
        const std::int64_t base = o * length * inner + i;
        for (std::int64_t k = 0; k < length; ++k) line[k] = static_cast<C>(in[base + k * inner]);
        std::iota(order.begin(), order.end(), std::int64_t{0});
        if (descending) {
          std::stable_sort(order.begin(), order.end(),
                           [&](std::int64_t a, std::int64_t b) { return less(line[b], line[a]); });
        } else {
          std::stable_sort(order.begin(), order.end(),
                           [&](std::int64_t a, std::int64_t b) { return less(line[a], line[b]); });
        }
        for (std::int64_t k = 0; k < length; ++k) {
          out[base + k * inner] = in[base + order[k] * inner];
          positions[static_cast<std::size_t>(base + k * inner)] = order[k];
        }
      }
    }
  });
  TensorData indices = TensorData::from_vec(positions, shape);
  if (index_dtype != DType::I64) indices = indices.convert(index_dtype);
  return {from_data(TensorData(std::move(sorted), shape, dtype), device),
          from_data(std::move(indices), device)};
}

Primitive Backend::sort(Primitive x, std::int64_t dim, bool descending) {
  return sort_with_indices(std::move(x), dim, descending, DType::I64).first;
}

Primitive Backend::argsort(Primitive x, std::int64_t dim, bool descending, DType index_dtype) {
  return sort_with_indices(std::move(x), dim, descending, index_dtype).second;
}

PrimitivePair Backend::topk_with_indices(Primitive x, std::int64_t k, std::int64_t dim,
                                         bool largest, DType index_dtype) {
  auto [values, indices] = sort_with_indices(std::move(x), dim, largest, index_dtype);
  return {slice_dim(*this, std::move(values), dim, 0, k),
          slice_dim(*this, std::move(indices), dim, 0, k)};
}

}  // namespace kiln
