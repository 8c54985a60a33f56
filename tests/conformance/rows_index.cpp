// Conformance rows: gather, scatter, select, select_assign, gather_nd, scatter_nd, slice,
// slice_assign, mask_where, mask_fill, mask_select, argwhere.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "conformance/conformance.h"
#include "tensor/common.h"

namespace kiln::conformance {
namespace {

using Index = std::vector<std::int64_t>;

constexpr IndexingUpdate kUpdates[] = {IndexingUpdate::Assign, IndexingUpdate::Add,
                                       IndexingUpdate::Mul, IndexingUpdate::Min,
                                       IndexingUpdate::Max};

// Index tensors cycle through every integer dtype so each reaches the kernels.
DType index_dtype(std::uint64_t n) { return kIntDTypes[n % std::size(kIntDTypes)]; }
Layout index_layout(std::uint64_t n) { return kLayouts[(n / 3) % std::size(kLayouts)]; }

std::vector<double> random_indices(const Shape& shape, std::int64_t bound, std::uint64_t seed) {
  if (shape.num_elements() == 0) return {};
  return random_values(shape, DType::I64, seed, 0.0, static_cast<double>(bound - 1));
}

// Values on a grid of 0.25 for floats: sums of a few stay exact even in f16/bf16, so the
// order-sensitive updates compare tightly.
std::vector<double> grid_values(const Shape& shape, DType dtype, std::uint64_t seed,
                                double lo = -3.0, double hi = 3.0) {
  std::vector<double> v = random_values(shape, dtype, seed, lo, hi);
  if (is_float(dtype)) {
    for (double& x : v) x = std::round(x * 4.0) / 4.0;
  }
  return v;
}

// The reference of an update mode, in double; Bool: add/max are `or`, mul/min are `and`.
double combine(IndexingUpdate mode, double a, double b, DType dtype) {
  if (dtype == DType::Bool) {
    const bool x = a != 0, y = b != 0;
    switch (mode) {
      case IndexingUpdate::Assign:
        return y;
      case IndexingUpdate::Add:
      case IndexingUpdate::Max:
        return x || y;
      case IndexingUpdate::Mul:
      case IndexingUpdate::Min:
        return x && y;
    }
  }
  switch (mode) {
    case IndexingUpdate::Assign:
      return b;
    case IndexingUpdate::Add:
      return a + b;
    case IndexingUpdate::Mul:
      return a * b;
    case IndexingUpdate::Min:
      return std::isnan(a) ? a : (std::isnan(b) || b < a ? b : a);
    case IndexingUpdate::Max:
      return std::isnan(a) ? a : (std::isnan(b) || b > a ? b : a);
  }
  return 0;
}

// Order-sensitive float updates round at every step in 16-bit types.
double update_tolerance(IndexingUpdate mode) {
  return mode == IndexingUpdate::Add || mode == IndexingUpdate::Mul ? 4.0 : 1.0;
}

// Values for x and for the values written by scatter-like ops: NaN in floats (once each), small
// magnitudes so integer products stay in range.
std::vector<double> update_operand(const Shape& shape, DType dtype, std::uint64_t seed,
                                   std::size_t nan_at) {
  std::vector<double> v = grid_values(shape, dtype, seed, -2.0, 2.0);
  if (is_float(dtype) && nan_at < v.size()) v[nan_at] = std::numeric_limits<double>::quiet_NaN();
  return v;
}

struct DimCase {
  Shape x;
  std::int64_t dim;
  Shape indices;
};

// gather / scatter cases: indices no larger than x except along dim (duplicates are likely).
const std::vector<DimCase>& dim_cases() {
  static const std::vector<DimCase> cases = {
      {{5, 3}, 0, {4, 3}},       {{4, 6}, 1, {4, 8}}, {{3, 4, 5}, -1, {2, 4, 3}},
      {{3, 4, 5}, 1, {3, 6, 5}}, {{6}, 0, {10}},      {{0, 3}, 1, {0, 2}},
      {{3, 4}, 0, {0, 4}},       {{1, 1}, 0, {3, 1}},
  };
  return cases;
}

std::int64_t norm_dim(std::int64_t dim, std::size_t rank) {
  return dim < 0 ? dim + static_cast<std::int64_t>(rank) : dim;
}

}  // namespace

KILN_CONFORMANCE_ROW(gather, ({"gather"})) {
  std::uint64_t seed = 1000;
  for (DType dtype : every_dtype()) {
    for (Layout layout : kLayouts) {
      for (const DimCase& c : dim_cases()) {
        const std::int64_t dim = norm_dim(c.dim, c.x.rank());
        const auto x = random_values(c.x, dtype, seed++);
        const auto idx = random_indices(c.indices, c.x[static_cast<std::size_t>(dim)], seed++);
        std::vector<double> expected(idx.size());
        for (std::size_t i = 0; i < idx.size(); ++i) {
          Index p = unravel(static_cast<std::int64_t>(i), c.indices);
          p[static_cast<std::size_t>(dim)] = static_cast<std::int64_t>(idx[i]);
          expected[i] = x[static_cast<std::size_t>(ravel(p, c.x))];
        }
        Primitive px = make_primitive(x, c.x, dtype, layout, device);
        Primitive pi =
            make_primitive(idx, c.indices, index_dtype(seed), index_layout(seed), device);
        expect_close(
            detail::into_data(detail::gather(c.dim, px, pi)), c.indices, dtype, expected,
            "gather dim " + std::to_string(c.dim) + " " + context(device, dtype, layout, c.x));
      }
    }
  }
  // Large enough to run on several threads.
  const Shape xs{300, 257};
  const Shape is{400, 257};
  const auto x = random_values(xs, DType::F32, 7);
  const auto idx = random_indices(is, 300, 8);
  std::vector<double> expected(idx.size());
  for (std::size_t i = 0; i < idx.size(); ++i) {
    expected[i] = x[static_cast<std::size_t>(idx[i]) * 257 + i % 257];
  }
  expect_close(detail::into_data(
                   detail::gather(0, make_primitive(x, xs, DType::F32, Layout::Transposed, device),
                                  make_primitive(idx, is, DType::I64, Layout::Contiguous, device))),
               is, DType::F32, expected, "gather large");
}

KILN_CONFORMANCE_ROW(scatter, ({"scatter"})) {
  std::uint64_t seed = 2000;
  for (DType dtype : every_dtype()) {
    for (Layout layout : kLayouts) {
      for (const DimCase& c : dim_cases()) {
        for (IndexingUpdate mode : kUpdates) {
          const std::int64_t dim = norm_dim(c.dim, c.x.rank());
          const auto x = update_operand(c.x, dtype, seed++, 0);
          const auto values = update_operand(c.indices, dtype, seed++, 1);
          const auto idx = random_indices(c.indices, c.x[static_cast<std::size_t>(dim)], seed++);
          // Row-major over indices: for Assign the last duplicate wins.
          std::vector<double> expected = x;
          for (std::size_t i = 0; i < idx.size(); ++i) {
            Index p = unravel(static_cast<std::int64_t>(i), c.indices);
            p[static_cast<std::size_t>(dim)] = static_cast<std::int64_t>(idx[i]);
            double& dst = expected[static_cast<std::size_t>(ravel(p, c.x))];
            dst = combine(mode, dst, values[i], dtype);
          }
          expected = representable(expected, dtype);
          Primitive px = make_primitive(x, c.x, dtype, layout, device);
          Primitive pi =
              make_primitive(idx, c.indices, index_dtype(seed), index_layout(seed), device);
          Primitive pv = make_primitive(values, c.indices, dtype, index_layout(seed + 1), device);
          const std::string what = "scatter " + update_name(mode) + " dim " +
                                   std::to_string(c.dim) + " " +
                                   context(device, dtype, layout, c.x);
          expect_close(detail::into_data(detail::scatter(c.dim, px, pi, pv, mode)), c.x, dtype,
                       expected, what, update_tolerance(mode));
          // The input is untouched.
          expect_close(detail::into_data(px), c.x, dtype, representable(x, dtype), what + " input");
        }
      }
    }
  }
  // A uniquely owned input may be reused as the output: same result.
  const Shape xs{4, 5};
  const auto x = random_values(xs, DType::F32, 11);
  const std::vector<double> idx = {3, 0, 3, 1, 2, 0, 0, 0, 1, 1};
  const std::vector<double> values = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<double> expected = x;
  for (std::size_t i = 0; i < idx.size(); ++i) {
    expected[static_cast<std::size_t>(idx[i]) * 5 + i % 5] = values[i];
  }
  Primitive owned =
      detail::add_scalar(make_primitive(x, xs, DType::F32, Layout::Contiguous, device), 0);
  expect_close(
      detail::into_data(detail::scatter(
          0, std::move(owned), make_primitive(idx, {2, 5}, DType::I64, Layout::Contiguous, device),
          make_primitive(values, {2, 5}, DType::F32, Layout::Contiguous, device),
          IndexingUpdate::Assign)),
      xs, DType::F32, expected, "scatter into an owned input");
  // Large, many duplicates along long lines: deterministic, last write wins.
  const Shape big{64, 1000};
  const Shape big_idx{256, 1000};
  const auto bx = random_values(big, DType::F32, 12);
  const auto bi = random_indices(big_idx, 64, 13);
  const auto bv = random_values(big_idx, DType::F32, 14);
  std::vector<double> bexp = bx;
  for (std::size_t i = 0; i < bi.size(); ++i) {
    bexp[static_cast<std::size_t>(bi[i]) * 1000 + i % 1000] = bv[i];
  }
  expect_close(detail::into_data(detail::scatter(
                   0, make_primitive(bx, big, DType::F32, Layout::Contiguous, device),
                   make_primitive(bi, big_idx, DType::I32, Layout::Contiguous, device),
                   make_primitive(bv, big_idx, DType::F32, Layout::Contiguous, device),
                   IndexingUpdate::Assign)),
               big, DType::F32, bexp, "scatter large");
}

KILN_CONFORMANCE_ROW(select, ({"select"})) {
  struct Case {
    Shape x;
    std::int64_t dim;
    std::int64_t count;
  };
  const std::vector<Case> cases = {{{5, 4}, 0, 7}, {{5, 4}, 1, 3}, {{3, 4, 2}, -2, 6},
                                   {{6}, 0, 6},    {{5, 4}, 0, 0}, {{0, 4}, 1, 2}};
  std::uint64_t seed = 3000;
  for (DType dtype : every_dtype()) {
    for (Layout layout : kLayouts) {
      for (const Case& c : cases) {
        const std::int64_t dim = norm_dim(c.dim, c.x.rank());
        const auto x = random_values(c.x, dtype, seed++);
        const auto idx = random_indices(Shape{c.count}, c.x[static_cast<std::size_t>(dim)], seed++);
        Shape out = c.x;
        out[static_cast<std::size_t>(dim)] = c.count;
        std::vector<double> expected(static_cast<std::size_t>(out.num_elements()));
        for (std::size_t i = 0; i < expected.size(); ++i) {
          Index p = unravel(static_cast<std::int64_t>(i), out);
          p[static_cast<std::size_t>(dim)] = static_cast<std::int64_t>(
              idx[static_cast<std::size_t>(p[static_cast<std::size_t>(dim)])]);
          expected[i] = x[static_cast<std::size_t>(ravel(p, c.x))];
        }
        Primitive px = make_primitive(x, c.x, dtype, layout, device);
        Primitive pi =
            make_primitive(idx, Shape{c.count}, index_dtype(seed), index_layout(seed), device);
        expect_close(
            detail::into_data(detail::select(px, c.dim, pi)), out, dtype, expected,
            "select dim " + std::to_string(c.dim) + " " + context(device, dtype, layout, c.x));
      }
    }
  }
}

KILN_CONFORMANCE_ROW(select_assign, ({"select_assign"})) {
  struct Case {
    Shape x;
    std::int64_t dim;
    std::int64_t count;
  };
  const std::vector<Case> cases = {{{5, 4}, 0, 7}, {{5, 4}, 1, 3}, {{3, 4, 2}, -2, 6},
                                   {{6}, 0, 9},    {{5, 4}, 0, 0}, {{0, 4}, 1, 2}};
  std::uint64_t seed = 4000;
  for (DType dtype : every_dtype()) {
    for (Layout layout : kLayouts) {
      for (const Case& c : cases) {
        for (IndexingUpdate mode : kUpdates) {
          const std::int64_t dim = norm_dim(c.dim, c.x.rank());
          const std::size_t d = static_cast<std::size_t>(dim);
          Shape vs = c.x;
          vs[d] = c.count;
          const auto x = update_operand(c.x, dtype, seed++, 0);
          const auto values = update_operand(vs, dtype, seed++, 2);
          const auto idx = random_indices(Shape{c.count}, c.x[d], seed++);
          // In order of the indices (the last duplicate wins in Assign).
          std::vector<double> expected = x;
          for (std::int64_t k = 0; k < c.count; ++k) {
            for (std::size_t i = 0; i < values.size(); ++i) {
              Index p = unravel(static_cast<std::int64_t>(i), vs);
              if (p[d] != k) continue;
              p[d] = static_cast<std::int64_t>(idx[static_cast<std::size_t>(k)]);
              double& dst = expected[static_cast<std::size_t>(ravel(p, c.x))];
              dst = combine(mode, dst, values[i], dtype);
            }
          }
          expected = representable(expected, dtype);
          Primitive px = make_primitive(x, c.x, dtype, layout, device);
          Primitive pi =
              make_primitive(idx, Shape{c.count}, index_dtype(seed), index_layout(seed), device);
          Primitive pv = make_primitive(values, vs, dtype, index_layout(seed + 2), device);
          expect_close(detail::into_data(detail::select_assign(px, c.dim, pi, pv, mode)), c.x,
                       dtype, expected,
                       "select_assign " + update_name(mode) + " dim " + std::to_string(c.dim) +
                           " " + context(device, dtype, layout, c.x),
                       update_tolerance(mode));
        }
      }
    }
  }
}

namespace {

struct NdCase {
  Shape x;
  Shape indices;  // [..., k]
};

const std::vector<NdCase>& nd_cases() {
  static const std::vector<NdCase> cases = {
      {{4, 3, 2}, {5, 2}}, {{4, 3, 2}, {2, 3, 1}}, {{4, 3, 2}, {6, 3}},
      {{5}, {4, 1}},       {{4, 3}, {0, 2}},       {{4, 3}, {3, 0}},
  };
  return cases;
}

// Index rows for gather_nd / scatter_nd, each coordinate in range of its dim of x.
std::vector<double> nd_indices(const Shape& x, const Shape& indices, std::uint64_t seed) {
  std::vector<double> out(static_cast<std::size_t>(indices.num_elements()));
  const std::int64_t k = indices[indices.rank() - 1];
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::int64_t bound = x[i % static_cast<std::size_t>(k)];
    out[i] =
        static_cast<double>((seed * 2654435761u + i * 40503u) % static_cast<std::uint64_t>(bound));
  }
  return out;
}

// The shape gather_nd gives: indices' leading dims, then x's dims past k.
Shape nd_shape(const Shape& x, const Shape& indices) {
  std::vector<std::int64_t> dims;
  const std::size_t k = static_cast<std::size_t>(indices[indices.rank() - 1]);
  for (std::size_t i = 0; i + 1 < indices.rank(); ++i) dims.push_back(indices[i]);
  for (std::size_t i = k; i < x.rank(); ++i) dims.push_back(x[i]);
  return Shape(dims);
}

// Flat offset in x of index row r, and the element count of the addressed sub-tensor.
std::int64_t nd_base(const Shape& x, const std::vector<double>& idx, std::int64_t k,
                     std::int64_t row, std::int64_t* inner) {
  std::int64_t flat = 0;
  *inner = 1;
  for (std::size_t d = 0; d < x.rank(); ++d) {
    const std::int64_t coord =
        static_cast<std::int64_t>(d) < k
            ? static_cast<std::int64_t>(idx[static_cast<std::size_t>(row * k) + d])
            : 0;
    flat = flat * x[d] + coord;
    if (static_cast<std::int64_t>(d) >= k) *inner *= x[d];
  }
  return flat;
}

}  // namespace

KILN_CONFORMANCE_ROW(gather_nd, ({"gather_nd"})) {
  std::uint64_t seed = 5000;
  for (DType dtype : every_dtype()) {
    for (Layout layout : kLayouts) {
      for (const NdCase& c : nd_cases()) {
        const std::int64_t k = c.indices[c.indices.rank() - 1];
        const auto x = random_values(c.x, dtype, seed++);
        const auto idx = nd_indices(c.x, c.indices, seed++);
        const Shape out = nd_shape(c.x, c.indices);
        std::int64_t row_count = 1;
        for (std::size_t i = 0; i + 1 < c.indices.rank(); ++i) row_count *= c.indices[i];
        std::vector<double> expected;
        for (std::int64_t r = 0; r < row_count; ++r) {
          std::int64_t inner = 1;
          const std::int64_t base = nd_base(c.x, idx, k, r, &inner);
          for (std::int64_t j = 0; j < inner; ++j)
            expected.push_back(x[static_cast<std::size_t>(base + j)]);
        }
        Primitive px = make_primitive(x, c.x, dtype, layout, device);
        Primitive pi =
            make_primitive(idx, c.indices, index_dtype(seed), index_layout(seed), device);
        expect_close(detail::into_data(detail::gather_nd(px, pi, out.rank())), out, dtype, expected,
                     "gather_nd indices " + c.indices.to_string() + " " +
                         context(device, dtype, layout, c.x));
      }
    }
  }
  // One row addressing every dim gives shape [1].
  const std::vector<double> x = {1, 2, 3, 4, 5, 6};
  Primitive px = make_primitive(x, {2, 3}, DType::F32, Layout::Contiguous, device);
  Primitive pi = make_primitive({1, 2}, {2}, DType::I64, Layout::Contiguous, device);
  expect_close(detail::into_data(detail::gather_nd(px, pi, 1)), Shape{1}, DType::F32, {6},
               "gather_nd full row");
}

KILN_CONFORMANCE_ROW(scatter_nd, ({"scatter_nd"})) {
  std::uint64_t seed = 6000;
  for (DType dtype : every_dtype()) {
    for (Layout layout : kLayouts) {
      for (const NdCase& c : nd_cases()) {
        for (IndexingUpdate mode : kUpdates) {
          const std::int64_t k = c.indices[c.indices.rank() - 1];
          const Shape vs = nd_shape(c.x, c.indices);
          const auto x = update_operand(c.x, dtype, seed++, 0);
          const auto values = update_operand(vs, dtype, seed++, 1);
          const auto idx = nd_indices(c.x, c.indices, seed++);
          std::int64_t row_count = 1;
          for (std::size_t i = 0; i + 1 < c.indices.rank(); ++i) row_count *= c.indices[i];
          std::vector<double> expected = x;
          for (std::int64_t r = 0; r < row_count; ++r) {
            std::int64_t inner = 1;
            const std::int64_t base = nd_base(c.x, idx, k, r, &inner);
            for (std::int64_t j = 0; j < inner; ++j) {
              double& dst = expected[static_cast<std::size_t>(base + j)];
              dst = combine(mode, dst, values[static_cast<std::size_t>(r * inner + j)], dtype);
            }
          }
          expected = representable(expected, dtype);
          Primitive px = make_primitive(x, c.x, dtype, layout, device);
          Primitive pi =
              make_primitive(idx, c.indices, index_dtype(seed), index_layout(seed), device);
          Primitive pv = make_primitive(values, vs, dtype, index_layout(seed + 1), device);
          expect_close(detail::into_data(detail::scatter_nd(px, pi, pv, mode)), c.x, dtype,
                       expected,
                       "scatter_nd " + update_name(mode) + " indices " + c.indices.to_string() +
                           " " + context(device, dtype, layout, c.x),
                       update_tolerance(mode));
        }
      }
    }
  }
}

namespace {

// The positions a slice visits along a dim of size n (a negative step walks the range
// backwards from its last element).
std::vector<std::int64_t> slice_positions(const Slice& s, std::int64_t n) {
  auto resolve = [n](std::int64_t i) { return std::clamp<std::int64_t>(i < 0 ? i + n : i, 0, n); };
  const std::int64_t start = resolve(s.start);
  const std::int64_t end = s.end ? resolve(*s.end) : n;
  std::vector<std::int64_t> out;
  if (s.step > 0) {
    for (std::int64_t i = start; i < end; i += s.step) out.push_back(i);
  } else {
    for (std::int64_t i = end - 1; i >= start; i += s.step) out.push_back(i);
  }
  return out;
}

const std::vector<std::vector<Slice>>& slice_cases() {
  static const std::vector<std::vector<Slice>> cases = {
      {Slice(1, 4), Slice(0, std::nullopt, 2)},
      {Slice(0, std::nullopt, -1)},
      {Slice(-3, std::nullopt), Slice(4, 1, -1)},
      {Slice(1, -1, -2), Slice(-10, 10)},
      {Slice::index(2)},
      {Slice(5, 2)},
      {Slice::all(), Slice(-1, std::nullopt, -3)},
      {Slice(0, std::nullopt, 4), Slice(1, 2)},
  };
  return cases;
}

// The positions per dim of a list of slices over shape (missing trailing dims whole).
std::vector<std::vector<std::int64_t>> region(const Shape& shape,
                                              const std::vector<Slice>& slices) {
  std::vector<std::vector<std::int64_t>> out;
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    out.push_back(slice_positions(d < slices.size() ? slices[d] : Slice::all(), shape[d]));
  }
  return out;
}

Shape region_shape(const std::vector<std::vector<std::int64_t>>& positions) {
  std::vector<std::int64_t> dims;
  for (const auto& p : positions) dims.push_back(static_cast<std::int64_t>(p.size()));
  return Shape(dims);
}

std::string slices_name(const std::vector<Slice>& slices) {
  std::string s = "[";
  for (const Slice& sl : slices) {
    s += std::to_string(sl.start) + ":" + (sl.end ? std::to_string(*sl.end) : "") + ":" +
         std::to_string(sl.step) + " ";
  }
  return s + "]";
}

}  // namespace

KILN_CONFORMANCE_ROW(slice, ({"slice"})) {
  const Shape shape{6, 5};
  std::uint64_t seed = 7000;
  for (DType dtype : every_dtype()) {
    for (Layout layout : kLayouts) {
      for (const auto& slices : slice_cases()) {
        const auto x = random_values(shape, dtype, seed++);
        const auto positions = region(shape, slices);
        const Shape out = region_shape(positions);
        std::vector<double> expected(static_cast<std::size_t>(out.num_elements()));
        for (std::size_t i = 0; i < expected.size(); ++i) {
          Index p = unravel(static_cast<std::int64_t>(i), out);
          for (std::size_t d = 0; d < p.size(); ++d)
            p[d] = positions[d][static_cast<std::size_t>(p[d])];
          expected[i] = x[static_cast<std::size_t>(ravel(p, shape))];
        }
        Primitive px = make_primitive(x, shape, dtype, layout, device);
        const std::string what =
            "slice " + slices_name(slices) + " " + context(device, dtype, layout, shape);
        Primitive sliced = detail::slice(px, slices);
        expect_close(detail::into_data(sliced), out, dtype, expected, what);
        // A slice of a slice composes (the view's strides and offset are right).
        if (out.num_elements() > 1) {
          std::vector<double> again;
          Primitive twice = detail::slice(sliced, {Slice(0, std::nullopt, -1)});
          for (std::int64_t r = out[0]; r-- > 0;) {
            for (std::int64_t c = 0; c < out[1]; ++c) {
              again.push_back(expected[static_cast<std::size_t>(r * out[1] + c)]);
            }
          }
          expect_close(detail::into_data(twice), out, dtype, again, what + " reversed again");
        }
      }
    }
  }
}

KILN_CONFORMANCE_ROW(slice_assign, ({"slice_assign"})) {
  const Shape shape{6, 5};
  std::uint64_t seed = 8000;
  for (DType dtype : every_dtype()) {
    for (Layout layout : kLayouts) {
      for (const auto& slices : slice_cases()) {
        const auto positions = region(shape, slices);
        const Shape rs = region_shape(positions);
        const auto x = random_values(shape, dtype, seed++);
        const auto values = random_values(rs, dtype, seed++);
        std::vector<double> expected = x;
        for (std::size_t i = 0; i < values.size(); ++i) {
          Index p = unravel(static_cast<std::int64_t>(i), rs);
          for (std::size_t d = 0; d < p.size(); ++d)
            p[d] = positions[d][static_cast<std::size_t>(p[d])];
          expected[static_cast<std::size_t>(ravel(p, shape))] = values[i];
        }
        Primitive px = make_primitive(x, shape, dtype, layout, device);
        Primitive pv = make_primitive(values, rs, dtype, index_layout(seed), device);
        const std::string what =
            "slice_assign " + slices_name(slices) + " " + context(device, dtype, layout, shape);
        expect_close(detail::into_data(detail::slice_assign(px, slices, pv)), shape, dtype,
                     expected, what);
        expect_close(detail::into_data(px), shape, dtype, x, what + " input untouched");
        // slice_fill writes one value over the same region.
        std::vector<double> filled = x;
        for (std::size_t i = 0; i < values.size(); ++i) {
          Index p = unravel(static_cast<std::int64_t>(i), rs);
          for (std::size_t d = 0; d < p.size(); ++d)
            p[d] = positions[d][static_cast<std::size_t>(p[d])];
          filled[static_cast<std::size_t>(ravel(p, shape))] = 1;
        }
        expect_close(detail::into_data(detail::slice_fill(px, slices, 1)), shape, dtype, filled,
                     what + " fill");
      }
    }
  }
  // Values broadcast over the region, and an owned input written in place.
  const auto x = random_values(shape, DType::F32, 1);
  Primitive owned =
      detail::add_scalar(make_primitive(x, shape, DType::F32, Layout::Contiguous, device), 0);
  Primitive row = make_primitive({7, 8, 9}, {1, 3}, DType::F32, Layout::Contiguous, device);
  std::vector<double> expected = x;
  for (std::int64_t r = 1; r < 6; r += 2) {
    for (std::int64_t c = 0; c < 3; ++c) expected[static_cast<std::size_t>(r * 5 + 2 + c)] = 7 + c;
  }
  expect_close(detail::into_data(detail::slice_assign(
                   std::move(owned), {Slice(1, std::nullopt, 2), Slice(2, 5)}, row)),
               shape, DType::F32, expected, "slice_assign broadcast values");
}

namespace {

struct MaskCase {
  Shape x, mask, values;
};

const std::vector<MaskCase>& mask_cases() {
  static const std::vector<MaskCase> cases = {
      {{3, 4}, {3, 4}, {3, 4}}, {{3, 4}, {1, 4}, {3, 1}},          {{1, 4}, {3, 1}, {1, 1}},
      {{0, 4}, {1, 4}, {1, 1}}, {{2, 3, 4}, {2, 1, 4}, {1, 3, 1}}, {{7}, {7}, {1}},
  };
  return cases;
}

Shape broadcast3(const Shape& a, const Shape& b, const Shape& c) {
  return detail::broadcast_shape(detail::broadcast_shape(a, b, "test"), c, "test");
}

}  // namespace

KILN_CONFORMANCE_ROW(mask_where, ({"mask_where"})) {
  std::uint64_t seed = 9000;
  for (DType dtype : every_dtype()) {
    for (Layout layout : kLayouts) {
      for (const MaskCase& c : mask_cases()) {
        const auto x = random_values(c.x, dtype, seed++);
        const auto m = random_values(c.mask, DType::Bool, seed++);
        const auto v = random_values(c.values, dtype, seed++);
        const Shape out = broadcast3(c.x, c.mask, c.values);
        std::vector<double> expected(static_cast<std::size_t>(out.num_elements()));
        for (std::size_t i = 0; i < expected.size(); ++i) {
          const Index p = unravel(static_cast<std::int64_t>(i), out);
          expected[i] = broadcast_at(m, c.mask, p) != 0 ? broadcast_at(v, c.values, p)
                                                        : broadcast_at(x, c.x, p);
        }
        Primitive px = make_primitive(x, c.x, dtype, layout, device);
        Primitive pm = make_primitive(m, c.mask, DType::Bool, index_layout(seed), device);
        Primitive pv = make_primitive(v, c.values, dtype, index_layout(seed + 1), device);
        expect_close(detail::into_data(detail::mask_where(px, pm, pv)), out, dtype, expected,
                     "mask_where " + context(device, dtype, layout, c.x) + " mask " +
                         c.mask.to_string() + " values " + c.values.to_string());
      }
    }
  }
  // Mixed dtypes of one kind promote (f16 with f32 gives f32).
  Primitive a = make_primitive({1, 2, 3}, {3}, DType::F16, Layout::Contiguous, device);
  Primitive b = make_primitive({4, 5, 6}, {3}, DType::F32, Layout::Contiguous, device);
  Primitive m = make_primitive({1, 0, 1}, {3}, DType::Bool, Layout::Contiguous, device);
  expect_close(detail::into_data(detail::mask_where(a, m, b)), Shape{3}, DType::F32, {4, 2, 6},
               "mask_where promotes");
}

KILN_CONFORMANCE_ROW(mask_fill, ({"mask_fill"})) {
  std::uint64_t seed = 10000;
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dtype : every_dtype()) {
    std::vector<double> fills = {1};
    if (is_float(dtype)) fills = {-1.5, std::numeric_limits<double>::quiet_NaN(), inf};
    if (is_signed_int(dtype)) fills = {-2, 5};
    if (is_unsigned_int(dtype)) fills = {0, 7};
    for (Layout layout : kLayouts) {
      for (const MaskCase& c : mask_cases()) {
        for (double fill : fills) {
          const auto x = random_values(c.x, dtype, seed++);
          const auto m = random_values(c.mask, DType::Bool, seed++);
          const Shape out = detail::broadcast_shape(c.x, c.mask, "test");
          std::vector<double> expected(static_cast<std::size_t>(out.num_elements()));
          for (std::size_t i = 0; i < expected.size(); ++i) {
            const Index p = unravel(static_cast<std::int64_t>(i), out);
            expected[i] = broadcast_at(m, c.mask, p) != 0 ? fill : broadcast_at(x, c.x, p);
          }
          expected = representable(expected, dtype);
          const Scalar value = dtype == DType::Bool ? Scalar(fill != 0)
                               : is_int(dtype)      ? Scalar(static_cast<std::int64_t>(fill))
                                                    : Scalar(fill);
          Primitive px = make_primitive(x, c.x, dtype, layout, device);
          Primitive pm = make_primitive(m, c.mask, DType::Bool, index_layout(seed), device);
          expect_close(detail::into_data(detail::mask_fill(px, pm, value)), out, dtype, expected,
                       "mask_fill " + std::to_string(fill) + " " +
                           context(device, dtype, layout, c.x) + " mask " + c.mask.to_string());
        }
      }
    }
  }
}

KILN_CONFORMANCE_ROW(mask_select, ({"mask_select"})) {
  std::uint64_t seed = 11000;
  for (DType dtype : every_dtype()) {
    for (Layout layout : kLayouts) {
      for (const MaskCase& c : mask_cases()) {
        const auto x = random_values(c.x, dtype, seed++);
        const auto m = random_values(c.mask, DType::Bool, seed++);
        const Shape out = detail::broadcast_shape(c.x, c.mask, "test");
        std::vector<double> expected;
        for (std::int64_t i = 0; i < out.num_elements(); ++i) {
          const Index p = unravel(i, out);
          if (broadcast_at(m, c.mask, p) != 0) expected.push_back(broadcast_at(x, c.x, p));
        }
        Primitive px = make_primitive(x, c.x, dtype, layout, device);
        Primitive pm = make_primitive(m, c.mask, DType::Bool, index_layout(seed), device);
        expect_close(
            detail::into_data(detail::mask_select(px, pm)),
            Shape{static_cast<std::int64_t>(expected.size())}, dtype, expected,
            "mask_select " + context(device, dtype, layout, c.x) + " mask " + c.mask.to_string());
      }
    }
  }
  // Large enough to compact on several threads.
  const Shape big{400, 300};
  const auto x = random_values(big, DType::F64, 3);
  const auto m = random_values(big, DType::Bool, 4);
  std::vector<double> expected;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (m[i] != 0) expected.push_back(x[i]);
  }
  expect_close(detail::into_data(detail::mask_select(
                   make_primitive(x, big, DType::F64, Layout::Transposed, device),
                   make_primitive(m, big, DType::Bool, Layout::Strided, device))),
               Shape{static_cast<std::int64_t>(expected.size())}, DType::F64, expected,
               "mask_select large");
}

KILN_CONFORMANCE_ROW(argwhere, ({"argwhere"})) {
  const DType index_dtype = detail::default_dtype(device, Kind::Int);
  std::uint64_t seed = 12000;
  const std::vector<Shape> shapes = {{3, 4}, {2, 3, 4}, {0, 3}, {5}, {1, 1}, {2, 1, 3, 2}};
  for (Layout layout : kLayouts) {
    for (const Shape& shape : shapes) {
      for (int fill = 0; fill < 3; ++fill) {
        // fill: 0 random, 1 all false, 2 all true.
        auto m = random_values(shape, DType::Bool, seed++);
        if (fill > 0) std::fill(m.begin(), m.end(), fill == 2 ? 1.0 : 0.0);
        std::vector<double> expected;
        std::int64_t count = 0;
        for (std::int64_t i = 0; i < shape.num_elements(); ++i) {
          if (m[static_cast<std::size_t>(i)] == 0) continue;
          for (std::int64_t c : unravel(i, shape)) expected.push_back(static_cast<double>(c));
          ++count;
        }
        Primitive pm = make_primitive(m, shape, DType::Bool, layout, device);
        expect_close(detail::into_data(detail::argwhere(pm)),
                     Shape{count, static_cast<std::int64_t>(shape.rank())}, index_dtype, expected,
                     "argwhere " + context(device, DType::Bool, layout, shape));
      }
    }
  }
  // Large: several chunks, coordinates carried across chunk boundaries.
  const Shape big{300, 7, 50};
  const auto m = random_values(big, DType::Bool, 5);
  std::vector<double> expected;
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < big.num_elements(); ++i) {
    if (m[static_cast<std::size_t>(i)] == 0) continue;
    for (std::int64_t c : unravel(i, big)) expected.push_back(static_cast<double>(c));
    ++count;
  }
  expect_close(detail::into_data(
                   detail::argwhere(make_primitive(m, big, DType::Bool, Layout::Offset, device))),
               Shape{count, 3}, index_dtype, expected, "argwhere large");
}

}  // namespace kiln::conformance
