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

// An unsigned key per element whose order is the sort's: NaN above everything (every NaN one
// key, so NaNs keep their order), -0 equal to +0, signed integers shifted to unsigned. The
// comparison and the stable sort are then made once, not once per dtype.
template <class T>
std::uint64_t sort_key(T value) {
  using C = compute_t<T>;
  const C v = static_cast<C>(value);
  if constexpr (std::is_floating_point_v<C>) {
    if (v != v) return ~std::uint64_t{0};
    const double d = v == 0 ? 0.0 : static_cast<double>(v);  // f32 and below are exact in f64
    std::uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    // Negative numbers: flip every bit (more negative, smaller); positive: set the sign bit.
    return (bits >> 63) != 0 ? ~bits : bits | (std::uint64_t{1} << 63);
  } else if constexpr (std::is_signed_v<C>) {
    return static_cast<std::uint64_t>(static_cast<std::int64_t>(v)) ^ (std::uint64_t{1} << 63);
  } else {
    return static_cast<std::uint64_t>(v);
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
  const std::int64_t count = shape.num_elements();
  const std::int64_t outer = length * inner == 0 ? 0 : count / (length * inner);
  std::vector<std::uint64_t> keys(static_cast<std::size_t>(count));
  visit_numeric_dtype(dtype, "sort", [&]<class T>(type_tag<T>) {
    const T* in = reinterpret_cast<const T*>(data.bytes().data());
    for (std::int64_t i = 0; i < count; ++i) keys[static_cast<std::size_t>(i)] = sort_key(in[i]);
  });
  const std::size_t element = dtype_size(dtype);
  const std::byte* in = data.bytes().data();
  std::vector<std::byte> sorted(data.bytes().size());
  std::vector<std::int64_t> positions(static_cast<std::size_t>(count));
  std::vector<std::int64_t> order(static_cast<std::size_t>(length));
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      const std::int64_t base = o * length * inner + i;
      const auto key = [&](std::int64_t k) {
        return keys[static_cast<std::size_t>(base + k * inner)];
      };
      std::iota(order.begin(), order.end(), std::int64_t{0});
      std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
        return descending ? key(b) < key(a) : key(a) < key(b);
      });
      for (std::int64_t k = 0; k < length; ++k) {
        const std::int64_t to = base + k * inner;
        std::memcpy(
            sorted.data() + static_cast<std::size_t>(to) * element,
            in + static_cast<std::size_t>(base + order[static_cast<std::size_t>(k)] * inner) *
                     element,
            element);
        positions[static_cast<std::size_t>(to)] = order[static_cast<std::size_t>(k)];
      }
    }
  }
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
