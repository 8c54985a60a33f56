// Conformance rows: sort, sort_with_indices, argsort, topk_with_indices, against a float64
// stable sort written here (NaN last ascending, first descending; topk ties by lower index).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "conformance/conformance.h"
#include "tensor/common.h"

namespace kiln::conformance {
namespace {

// NaN is the largest value.
bool before_ascending(double a, double b) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return a < b;
}

// The positions of line in sorted order (stable), descending or not.
std::vector<std::int64_t> sorted_positions(const std::vector<double>& line, bool descending) {
  std::vector<std::int64_t> order(line.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    const double va = line[static_cast<std::size_t>(a)], vb = line[static_cast<std::size_t>(b)];
    return descending ? before_ascending(vb, va) : before_ascending(va, vb);
  });
  return order;
}

struct SortedRef {
  std::vector<double> values;
  std::vector<double> indices;
};

// Row-major strides of shape.
std::vector<std::int64_t> strides_of(const Shape& shape) {
  std::vector<std::int64_t> strides(shape.rank(), 1);
  for (std::size_t d = shape.rank(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return strides;
}

// For every line along dim: the first keep entries of its stable order (all when keep < 0).
SortedRef sort_reference(const std::vector<double>& values, const Shape& shape, std::int64_t dim,
                         bool descending, std::int64_t keep) {
  const std::size_t d = static_cast<std::size_t>(dim);
  const std::int64_t n = shape[d];
  Shape out = shape;
  out[d] = keep < 0 ? n : keep;
  Shape kept = shape;
  kept[d] = 1;
  const auto in_strides = strides_of(shape);
  const auto out_strides = strides_of(out);
  SortedRef ref{std::vector<double>(static_cast<std::size_t>(out.num_elements())),
                std::vector<double>(static_cast<std::size_t>(out.num_elements()))};
  for (std::int64_t i = 0; i < kept.num_elements(); ++i) {
    const auto index = unravel(i, kept);
    std::int64_t in_base = 0, out_base = 0;
    for (std::size_t k = 0; k < index.size(); ++k) {
      in_base += index[k] * in_strides[k];
      out_base += index[k] * out_strides[k];
    }
    std::vector<double> line(static_cast<std::size_t>(n));
    for (std::int64_t j = 0; j < n; ++j) {
      line[static_cast<std::size_t>(j)] =
          values[static_cast<std::size_t>(in_base + j * in_strides[d])];
    }
    const auto order = sorted_positions(line, descending);
    for (std::int64_t j = 0; j < out[d]; ++j) {
      const auto at = static_cast<std::size_t>(out_base + j * out_strides[d]);
      const std::int64_t from = order[static_cast<std::size_t>(j)];
      ref.values[at] = line[static_cast<std::size_t>(from)];
      ref.indices[at] = static_cast<double>(from);
    }
  }
  return ref;
}

const std::vector<Shape>& sort_shapes() {
  static const std::vector<Shape> shapes = {{3, 7}, {2, 3, 5}, {0, 4}, {6, 1}, {9}, {4, 0}};
  return shapes;
}

// Narrow integer-valued inputs, so there are many ties and stability shows; NaN optional.
std::vector<double> tied_values(const Shape& shape, DType dtype, std::uint64_t seed,
                                bool with_nan) {
  auto values = random_values(shape, dtype, seed, -3, 3);
  for (double& v : values) v = std::round(v);
  if (is_unsigned_int(dtype)) {
    for (double& v : values) v = std::fabs(v);
  }
  if (with_nan && values.size() > 4) {
    values[1] = kNaN;
    values[values.size() - 2] = kNaN;
  }
  return values;
}

}  // namespace

KILN_CONFORMANCE_ROW(sort, ({"sort", "sort_with_indices", "argsort"})) {
  const DType index_dtype = detail::default_dtype(device, Kind::Int);
  std::uint64_t seed = 6000;
  for (DType dtype : kNumericDTypes) {
    for (bool with_nan : {false, true}) {
      if (with_nan && !is_float(dtype)) continue;
      for (Layout layout : kLayouts) {
        for (const Shape& shape : sort_shapes()) {
          const auto values = tied_values(shape, dtype, seed++, with_nan);
          Primitive x = make_primitive(values, shape, dtype, layout, device);
          const auto rank = static_cast<std::int64_t>(shape.rank());
          for (std::int64_t dim = 0; dim < rank; ++dim) {
            for (bool descending : {false, true}) {
              const SortedRef ref = sort_reference(values, shape, dim, descending, -1);
              const std::int64_t api_dim = dim == rank - 1 ? -1 : dim;
              const std::string ctx =
                  context(device, dtype, layout, shape) + " dim " + std::to_string(api_dim) +
                  (descending ? " descending" : " ascending") + (with_nan ? " nan" : "");
              expect_close(detail::into_data(detail::sort(x, api_dim, descending)), shape, dtype,
                           ref.values, "sort " + ctx);
              auto [v, i] = detail::sort_with_indices(x, api_dim, descending);
              expect_close(detail::into_data(v), shape, dtype, ref.values,
                           "sort_with_indices values " + ctx);
              expect_close(detail::into_data(i), shape, index_dtype, ref.indices,
                           "sort_with_indices indices " + ctx);
              expect_close(detail::into_data(detail::argsort(x, api_dim, descending)), shape,
                           index_dtype, ref.indices, "argsort " + ctx);
            }
          }
        }
      }
    }
  }
}

KILN_CONFORMANCE_ROW(topk, ({"topk_with_indices"})) {
  const DType index_dtype = detail::default_dtype(device, Kind::Int);
  std::uint64_t seed = 7000;
  for (DType dtype : kNumericDTypes) {
    for (bool with_nan : {false, true}) {
      if (with_nan && !is_float(dtype)) continue;
      for (Layout layout : kLayouts) {
        for (const Shape& shape : sort_shapes()) {
          const auto values = tied_values(shape, dtype, seed++, with_nan);
          Primitive x = make_primitive(values, shape, dtype, layout, device);
          const auto rank = static_cast<std::int64_t>(shape.rank());
          for (std::int64_t dim = 0; dim < rank; ++dim) {
            const std::int64_t n = shape[static_cast<std::size_t>(dim)];
            for (std::int64_t k : {std::int64_t{0}, std::int64_t{1}, std::int64_t{2}, n}) {
              if (k > n) continue;
              for (bool largest : {true, false}) {
                // Largest first is the stable descending order: equal values by lower index.
                const SortedRef ref = sort_reference(values, shape, dim, largest, k);
                Shape out = shape;
                out[static_cast<std::size_t>(dim)] = k;
                const std::int64_t api_dim = dim - rank;
                const std::string ctx = context(device, dtype, layout, shape) + " dim " +
                                        std::to_string(api_dim) + " k " + std::to_string(k) +
                                        (largest ? " largest" : " smallest") +
                                        (with_nan ? " nan" : "");
                auto [v, i] = detail::topk_with_indices(x, k, api_dim, largest);
                expect_close(detail::into_data(v), out, dtype, ref.values, "topk values " + ctx);
                expect_close(detail::into_data(i), out, index_dtype, ref.indices,
                             "topk indices " + ctx);
              }
            }
          }
        }
      }
    }
  }
}

// One long slice takes the parallel merge sort; many short slices the per-slice path; both
// must stay stable.
KILN_CONFORMANCE_ROW(sort_large, ({"sort_with_indices", "topk_with_indices"})) {
  const DType index_dtype = detail::default_dtype(device, Kind::Int);
  for (const Shape& shape : {Shape{140001}, Shape{3, 70000}, Shape{2000, 70}}) {
    for (DType dtype : {DType::F32, DType::I16}) {
      auto values = random_values(shape, dtype, 8000, -1000, 1000);
      if (is_float(dtype)) {
        for (double& v : values) v = std::round(v);  // ties
        values[values.size() / 3] = kNaN;
      }
      const std::int64_t dim = static_cast<std::int64_t>(shape.rank()) - 1;
      const SortedRef refs[2] = {sort_reference(values, shape, dim, false, -1),
                                 sort_reference(values, shape, dim, true, -1)};
      const std::int64_t k = 5;
      const SortedRef top = sort_reference(values, shape, dim, true, k);
      // Integers on the harder (strided) layout only, to keep the row fast.
      for (Layout layout : {Layout::Contiguous, Layout::Strided}) {
        if (is_int(dtype) && layout == Layout::Contiguous) continue;
        Primitive x = make_primitive(values, shape, dtype, layout, device);
        for (bool descending : {false, true}) {
          const SortedRef& ref = refs[descending ? 1 : 0];
          const std::string ctx =
              context(device, dtype, layout, shape) + (descending ? " descending" : " ascending");
          auto [v, i] = detail::sort_with_indices(x, dim, descending);
          expect_close(detail::into_data(v), shape, dtype, ref.values, "sort values " + ctx);
          expect_close(detail::into_data(i), shape, index_dtype, ref.indices,
                       "sort indices " + ctx);
        }
        Shape out = shape;
        out[static_cast<std::size_t>(dim)] = k;
        auto [tv, ti] = detail::topk_with_indices(x, k, dim, true);
        expect_close(detail::into_data(tv), out, dtype, top.values, "topk large values");
        expect_close(detail::into_data(ti), out, index_dtype, top.indices, "topk large indices");
      }
    }
  }
}

}  // namespace kiln::conformance
