// Conformance rows: cat and repeat_dim, and the layout views reshape, expand, permute,
// swap_dims, flip and unfold.
#include <algorithm>
#include <numeric>

#include "conformance/conformance.h"
#include "tensor/common.h"

namespace kiln::conformance {
namespace {

using Index = std::vector<std::int64_t>;

// out[i] = x[source(index of i in out)] over the output shape: the reference of every view.
std::vector<double> remap(const std::vector<double>& x, const Shape& x_shape, const Shape& out,
                          const std::function<Index(const Index&)>& source) {
  std::vector<double> result(static_cast<std::size_t>(out.num_elements()));
  for (std::size_t i = 0; i < result.size(); ++i) {
    result[i] = x[static_cast<std::size_t>(
        ravel(source(unravel(static_cast<std::int64_t>(i), out)), x_shape))];
  }
  return result;
}

}  // namespace

KILN_CONFORMANCE_ROW(cat, ({"cat"})) {
  struct Case {
    std::vector<Shape> inputs;
    std::int64_t dim;
  };
  const std::vector<Case> cases = {
      {{{2, 3}, {4, 3}}, 0},
      {{{2, 3}, {2, 1}, {2, 5}}, 1},
      {{{2, 3, 4}, {2, 0, 4}, {2, 2, 4}}, -2},
      {{{3}, {0}, {4}, {1}}, 0},
      {{{2, 3, 1}, {2, 3, 2}}, 2},
      {{{0, 3}, {0, 3}}, 0},
      {{{5, 2}}, 1},
      {{{1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2},
        {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2},
        {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}},
       0},
  };
  std::uint64_t seed = 20000;
  for (DType dtype : every_dtype()) {
    for (std::size_t li = 0; li < std::size(kLayouts); ++li) {
      for (const Case& c : cases) {
        const std::size_t rank = c.inputs[0].rank();
        const std::size_t d =
            static_cast<std::size_t>(c.dim < 0 ? c.dim + static_cast<std::int64_t>(rank) : c.dim);
        std::vector<std::vector<double>> values;
        detail::Prims prims;
        Shape out = c.inputs[0];
        out[d] = 0;
        for (std::size_t i = 0; i < c.inputs.size(); ++i) {
          values.push_back(random_values(c.inputs[i], dtype, seed++));
          // Each input in another layout.
          prims.push_back(make_primitive(values.back(), c.inputs[i], dtype,
                                         kLayouts[(li + i) % std::size(kLayouts)], device));
          out[d] += c.inputs[i][d];
        }
        std::vector<double> expected(static_cast<std::size_t>(out.num_elements()));
        for (std::size_t e = 0; e < expected.size(); ++e) {
          Index p = unravel(static_cast<std::int64_t>(e), out);
          std::size_t i = 0;
          while (p[d] >= c.inputs[i][d]) p[d] -= c.inputs[i++][d];
          expected[e] = values[i][static_cast<std::size_t>(ravel(p, c.inputs[i]))];
        }
        expect_close(detail::into_data(detail::cat(prims, c.dim)), out, dtype, expected,
                     "cat of " + std::to_string(c.inputs.size()) + " along " +
                         std::to_string(c.dim) + " " +
                         context(device, dtype, kLayouts[li], c.inputs[0]));
      }
    }
  }
  // Mixed dtypes of one kind promote: i8 with u8 gives i16, f16 with bf16 gives f32.
  detail::Prims ints = {make_primitive({-1, 2}, {2}, DType::I8, Layout::Contiguous, device),
                        make_primitive({200}, {1}, DType::U8, Layout::Contiguous, device)};
  expect_close(detail::into_data(detail::cat(ints, 0)), Shape{3}, DType::I16, {-1, 2, 200},
               "cat promotes ints");
  detail::Prims floats = {make_primitive({1.5}, {1}, DType::F16, Layout::Contiguous, device),
                          make_primitive({2.5}, {1}, DType::BF16, Layout::Contiguous, device),
                          make_primitive({3.5}, {1}, DType::F16, Layout::Contiguous, device)};
  expect_close(detail::into_data(detail::cat(floats, 0)), Shape{3}, DType::F32, {1.5, 2.5, 3.5},
               "cat promotes floats");
  // Large inputs: copies spread over threads.
  const Shape a{200, 300}, b{100, 300};
  const auto va = random_values(a, DType::F32, 1), vb = random_values(b, DType::F32, 2);
  std::vector<double> expected = va;
  expected.insert(expected.end(), vb.begin(), vb.end());
  expect_close(
      detail::into_data(detail::cat({make_primitive(va, a, DType::F32, Layout::Transposed, device),
                                     make_primitive(vb, b, DType::F32, Layout::Contiguous, device)},
                                    0)),
      Shape{300, 300}, DType::F32, expected, "cat large");
}

KILN_CONFORMANCE_ROW(repeat_dim, ({"repeat_dim"})) {
  struct Case {
    Shape x;
    std::int64_t dim, times;
  };
  const std::vector<Case> cases = {{{2, 3}, 0, 3}, {{2, 3}, 1, 2},   {{2, 3}, -1, 0},
                                   {{2, 3}, 0, 1}, {{4}, 0, 5},      {{2, 1, 3}, 1, 4},
                                   {{0, 3}, 0, 3}, {{3, 2, 2}, 2, 3}};
  std::uint64_t seed = 21000;
  for (DType dtype : every_dtype()) {
    for (Layout layout : kLayouts) {
      for (const Case& c : cases) {
        const std::size_t d = static_cast<std::size_t>(
            c.dim < 0 ? c.dim + static_cast<std::int64_t>(c.x.rank()) : c.dim);
        const auto x = random_values(c.x, dtype, seed++);
        Shape out = c.x;
        out[d] *= c.times;
        const auto expected = remap(x, c.x, out, [&](Index p) {
          p[d] %= c.x[d];
          return p;
        });
        Primitive px = make_primitive(x, c.x, dtype, layout, device);
        expect_close(detail::into_data(detail::repeat_dim(px, c.dim, c.times)), out, dtype,
                     expected,
                     "repeat_dim " + std::to_string(c.dim) + " x" + std::to_string(c.times) + " " +
                         context(device, dtype, layout, c.x));
      }
    }
  }
}

KILN_CONFORMANCE_ROW(reshape, ({"reshape"})) {
  struct Case {
    Shape from, to;
  };
  const std::vector<Case> cases = {{{2, 6}, {3, 4}},     {{2, 6}, {12}},   {{3, 4}, {2, 2, 3}},
                                   {{4, 3}, {4, 3}},     {{0, 3}, {3, 0}}, {{2, 3, 4}, {6, 4}},
                                   {{2, 3, 4}, {2, 12}}, {{1, 5}, {5, 1}}};
  std::uint64_t seed = 22000;
  for (DType dtype : every_dtype()) {
    for (Layout layout : kLayouts) {
      for (const Case& c : cases) {
        // Row-major order is kept whatever the layout (views when possible, copies otherwise).
        const auto x = random_values(c.from, dtype, seed++);
        Primitive px = make_primitive(x, c.from, dtype, layout, device);
        expect_close(
            detail::into_data(detail::reshape(px, c.to, c.to.rank())), c.to, dtype, x,
            "reshape to " + c.to.to_string() + " " + context(device, dtype, layout, c.from));
      }
    }
  }
}

KILN_CONFORMANCE_ROW(expand, ({"expand"})) {
  struct Case {
    Shape from, to;
  };
  const std::vector<Case> cases = {{{3, 1}, {3, 4}}, {{1, 4}, {5, 4}},       {{4}, {2, 4}},
                                   {{1, 1}, {2, 3}}, {{2, 1, 3}, {2, 4, 3}}, {{3, 1}, {3, 0}},
                                   {{2, 3}, {2, 3}}};
  std::uint64_t seed = 23000;
  for (DType dtype : every_dtype()) {
    for (Layout layout : kLayouts) {
      for (const Case& c : cases) {
        const auto x = random_values(c.from, dtype, seed++);
        const std::size_t lead = c.to.rank() - c.from.rank();
        const auto expected = remap(x, c.from, c.to, [&](const Index& p) {
          Index q(c.from.rank());
          for (std::size_t i = 0; i < q.size(); ++i) q[i] = c.from[i] == 1 ? 0 : p[lead + i];
          return q;
        });
        Primitive px = make_primitive(x, c.from, dtype, layout, device);
        // Read the view and an elementwise result of it (the broadcast strides feed kernels).
        Primitive expanded = detail::expand(px, c.to);
        const std::string what =
            "expand to " + c.to.to_string() + " " + context(device, dtype, layout, c.from);
        expect_close(detail::into_data(expanded), c.to, dtype, expected, what);
        expect_close(detail::into_data(detail::slice(expanded, {Slice(0, std::nullopt, -1)})), c.to,
                     dtype,
                     remap(expected, c.to, c.to,
                           [&](Index p) {
                             p[0] = c.to[0] - 1 - p[0];
                             return p;
                           }),
                     what + " reversed");
      }
    }
  }
}

KILN_CONFORMANCE_ROW(permute, ({"permute", "swap_dims"})) {
  const Shape shape{2, 3, 4};
  const std::vector<std::vector<std::int64_t>> perms = {{0, 1, 2}, {2, 0, 1}, {1, 2, 0},
                                                        {2, 1, 0}, {0, 2, 1}, {-1, 0, 1}};
  const std::vector<std::pair<std::int64_t, std::int64_t>> swaps = {
      {0, 2}, {1, -1}, {0, 1}, {1, 1}};
  std::uint64_t seed = 24000;
  for (DType dtype : every_dtype()) {
    for (Layout layout : kLayouts) {
      const auto x = random_values(shape, dtype, seed++);
      Primitive px = make_primitive(x, shape, dtype, layout, device);
      for (const auto& perm : perms) {
        std::vector<std::size_t> axes;
        std::vector<std::int64_t> dims;
        for (std::int64_t a : perm) {
          axes.push_back(static_cast<std::size_t>(a < 0 ? a + 3 : a));
          dims.push_back(shape[axes.back()]);
        }
        const Shape out(dims);
        const auto expected = remap(x, shape, out, [&](const Index& p) {
          Index q(3);
          for (std::size_t i = 0; i < 3; ++i) q[axes[i]] = p[i];
          return q;
        });
        expect_close(detail::into_data(detail::permute(px, perm)), out, dtype, expected,
                     "permute " + context(device, dtype, layout, shape));
      }
      for (const auto& [a, b] : swaps) {
        const std::size_t da = static_cast<std::size_t>(a < 0 ? a + 3 : a);
        const std::size_t db = static_cast<std::size_t>(b < 0 ? b + 3 : b);
        std::vector<std::int64_t> dims(shape.dims().begin(), shape.dims().end());
        std::swap(dims[da], dims[db]);
        const Shape out(dims);
        const auto expected = remap(x, shape, out, [&](Index p) {
          std::swap(p[da], p[db]);
          return p;
        });
        expect_close(detail::into_data(detail::swap_dims(px, a, b)), out, dtype, expected,
                     "swap_dims " + context(device, dtype, layout, shape));
      }
    }
  }
}

KILN_CONFORMANCE_ROW(flip, ({"flip"})) {
  const std::vector<Shape> shapes = {{2, 3, 4}, {0, 3, 2}, {5, 1, 2}};
  const std::vector<std::vector<std::int64_t>> axes_list = {{0}, {2}, {0, 2}, {-1, 1, 0}, {}};
  std::uint64_t seed = 25000;
  for (DType dtype : every_dtype()) {
    for (Layout layout : kLayouts) {
      for (const Shape& shape : shapes) {
        const auto x = random_values(shape, dtype, seed++);
        Primitive px = make_primitive(x, shape, dtype, layout, device);
        for (const auto& axes : axes_list) {
          const auto expected = remap(x, shape, shape, [&](Index p) {
            for (std::int64_t a : axes) {
              const std::size_t d = static_cast<std::size_t>(a < 0 ? a + 3 : a);
              p[d] = shape[d] - 1 - p[d];
            }
            return p;
          });
          expect_close(detail::into_data(detail::flip(px, axes)), shape, dtype, expected,
                       "flip " + std::to_string(axes.size()) + " axes " +
                           context(device, dtype, layout, shape));
        }
      }
    }
  }
}

KILN_CONFORMANCE_ROW(unfold, ({"unfold"})) {
  struct Case {
    Shape x;
    std::int64_t dim, size, step;
  };
  const std::vector<Case> cases = {{{3, 8}, 1, 3, 2},  {{3, 8}, 1, 8, 1}, {{6, 2}, 0, 2, 2},
                                   {{6, 2}, -2, 4, 1}, {{7}, 0, 3, 3},    {{0, 5}, 1, 2, 1}};
  std::uint64_t seed = 26000;
  for (DType dtype : every_dtype()) {
    for (Layout layout : kLayouts) {
      for (const Case& c : cases) {
        const std::size_t d = static_cast<std::size_t>(
            c.dim < 0 ? c.dim + static_cast<std::int64_t>(c.x.rank()) : c.dim);
        const auto x = random_values(c.x, dtype, seed++);
        std::vector<std::int64_t> dims(c.x.dims().begin(), c.x.dims().end());
        dims[d] = (dims[d] - c.size) / c.step + 1;
        dims.push_back(c.size);
        const Shape out(dims);
        const auto expected = remap(x, c.x, out, [&](const Index& p) {
          Index q(p.begin(), p.end() - 1);
          q[d] = p[d] * c.step + p.back();
          return q;
        });
        Primitive px = make_primitive(x, c.x, dtype, layout, device);
        expect_close(detail::into_data(detail::unfold(px, c.dim, c.size, c.step)), out, dtype,
                     expected,
                     "unfold " + std::to_string(c.size) + "/" + std::to_string(c.step) + " " +
                         context(device, dtype, layout, c.x));
      }
    }
  }
}

}  // namespace kiln::conformance
