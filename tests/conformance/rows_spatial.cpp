// Conformance rows: convolution and its transpose and gradients, pooling, interpolation,
// unfold/fold. Each reference is a direct float64 loop over the op's definition (PyTorch's
// index rules). The ops are linear in the input (max pooling given its argmax), so each
// reference enumerates the terms (output position, input position, weight) once: the forward
// result sums them one way and the gradient, the exact adjoint, sums them the other way.
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <sstream>

#include "conformance/conformance.h"
#include "runtime/registry.h"
#include "tensor/common.h"

namespace kiln::conformance {
namespace {

using Sizes = std::vector<std::int64_t>;
using Values = std::vector<double>;

constexpr DType kMainDTypes[] = {DType::F32, DType::F64};
constexpr DType kHalfDTypes[] = {DType::F16, DType::BF16};

Shape spatial_shape(const Shape& s) { return Shape(s.dims().subspan(2)); }

Shape with_spatial(std::int64_t n, std::int64_t c, const Sizes& spatial) {
  Sizes dims{n, c};
  dims.insert(dims.end(), spatial.begin(), spatial.end());
  return Shape(dims);
}

std::string sizes_text(const Sizes& s) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < s.size(); ++i) out << (i ? "," : "") << s[i];
  out << "]";
  return out.str();
}

void check(const Primitive& actual, const Shape& shape, DType dtype, const Values& expected,
           const std::string& what, double scale = 1.0) {
  expect_close(detail::into_data(actual), shape, dtype, expected, what, scale);
}

Values zeros(const Shape& s) { return Values(static_cast<std::size_t>(s.num_elements()), 0.0); }

// ---- convolution ---------------------------------------------------------------------------

// Calls term(image_flat, grid_flat, weight_flat) for every product of a convolution that reads
// image [N, Ci, in...] into grid [N, Co, out...] with weight [Co, Ci / groups, k...].
void for_each_conv_term(const Shape& image, const Shape& grid, const Shape& weight,
                        const Sizes& stride, const Sizes& padding, const Sizes& dilation,
                        std::int64_t groups,
                        const std::function<void(std::int64_t, std::int64_t, std::int64_t)>& term) {
  const std::size_t dims = image.rank() - 2;
  const std::int64_t in_per_group = image[1] / groups;
  const std::int64_t out_per_group = grid[1] / groups;
  const Shape kernel = spatial_shape(weight);
  for (std::int64_t o = 0; o < grid.num_elements(); ++o) {
    const auto oi = unravel(o, grid);
    const std::int64_t group = oi[1] / out_per_group;
    for (std::int64_t c = 0; c < in_per_group; ++c) {
      for (std::int64_t k = 0; k < kernel.num_elements(); ++k) {
        const auto ki = unravel(k, kernel);
        std::vector<std::int64_t> ii{oi[0], group * in_per_group + c};
        std::vector<std::int64_t> wi{oi[1], c};
        bool inside = true;
        for (std::size_t d = 0; d < dims; ++d) {
          const std::int64_t pos = oi[2 + d] * stride[d] - padding[d] + ki[d] * dilation[d];
          inside = inside && pos >= 0 && pos < image[2 + d];
          ii.push_back(pos);
          wi.push_back(ki[d]);
        }
        if (inside) term(ravel(ii, image), o, ravel(wi, weight));
      }
    }
  }
}

struct ConvCase {
  Shape x;
  Shape weight;
  Sizes stride, padding, dilation;  // empty: the defaults, filled in by the tensor layer
  std::int64_t groups = 1;
  bool bias = false;
};

Sizes filled(const Sizes& v, std::size_t dims, std::int64_t fallback) {
  return v.empty() ? Sizes(dims, fallback) : v;
}

KILN_CONFORMANCE_ROW(convolution,
                     ({"conv", "conv_x_backward", "conv_weight_backward", "conv_bias_backward"})) {
  const std::vector<ConvCase> cases = {
      {{2, 4, 9}, {6, 2, 3}, {2}, {1}, {1}, 2, true},
      {{1, 3, 11}, {2, 3, 2}, {}, {}, {3}, 1, false},
      {{2, 3, 6, 5}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {}, 1, true},
      {{1, 4, 7, 6}, {4, 1, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 4, false},
      {{2, 3, 4, 5}, {5, 3, 1, 1}, {}, {}, {}, 1, true},
      {{1, 2, 4, 5, 4}, {3, 2, 2, 3, 2}, {1, 2, 1}, {1, 0, 1}, {1, 1, 2}, 1, true},
      {{0, 3, 5, 5}, {2, 3, 3, 3}, {}, {1, 1}, {}, 1, true},
      // As wide as the input at unit strides (the CPU's shifted-copy im2col): dilated; taps
      // whose rows fall wholly in the padding; one image whose plane is split in row blocks.
      {{1, 2, 7, 9}, {3, 2, 3, 3}, {}, {2, 2}, {2, 2}, 1, true},
      {{2, 1, 3, 4}, {2, 1, 5, 5}, {}, {2, 2}, {}, 1, false},
      {{1, 2, 32, 32}, {2, 2, 3, 3}, {}, {1, 1}, {}, 1, true},
  };
  Backend& backend = backend_for(device);
  std::uint64_t seed = 1;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const ConvCase& c = cases[ci];
    const std::size_t dims = c.x.rank() - 2;
    const Sizes stride = filled(c.stride, dims, 1), padding = filled(c.padding, dims, 0);
    const Sizes dilation = filled(c.dilation, dims, 1);
    Sizes out_spatial;
    for (std::size_t d = 0; d < dims; ++d) {
      out_spatial.push_back(
          (c.x[2 + d] + 2 * padding[d] - dilation[d] * (c.weight[2 + d] - 1) - 1) / stride[d] + 1);
    }
    const Shape y_shape = with_spatial(c.x[0], c.weight[0], out_spatial);
    std::vector<DType> dtypes(std::begin(kMainDTypes), std::end(kMainDTypes));
    if (ci == 2) dtypes.insert(dtypes.end(), std::begin(kHalfDTypes), std::end(kHalfDTypes));
    for (DType dtype : dtypes) {
      for (Layout layout : kLayouts) {
        const std::string what =
            "conv case " + std::to_string(ci) + " " + context(device, dtype, layout, c.x);
        const Values x = random_values(c.x, dtype, seed++, -1, 1);
        const Values w = random_values(c.weight, dtype, seed++, -1, 1);
        const Values b = random_values(Shape{c.weight[0]}, dtype, seed++, -1, 1);
        const Values g = random_values(y_shape, dtype, seed++, -1, 1);
        Values y = zeros(y_shape), dx = zeros(c.x), dw = zeros(c.weight);
        Values db(static_cast<std::size_t>(c.weight[0]), 0.0);
        for_each_conv_term(c.x, y_shape, c.weight, stride, padding, dilation, c.groups,
                           [&](std::int64_t i, std::int64_t o, std::int64_t k) {
                             const auto iu = static_cast<std::size_t>(i),
                                        ou = static_cast<std::size_t>(o),
                                        ku = static_cast<std::size_t>(k);
                             y[ou] += x[iu] * w[ku];
                             dx[iu] += g[ou] * w[ku];
                             dw[ku] += g[ou] * x[iu];
                           });
        for (std::int64_t o = 0; o < y_shape.num_elements(); ++o) {
          const auto channel = static_cast<std::size_t>(unravel(o, y_shape)[1]);
          if (c.bias) y[static_cast<std::size_t>(o)] += b[channel];
          db[channel] += g[static_cast<std::size_t>(o)];
        }
        // The weight takes the transposed layout too, the gradient the strided one.
        const Layout weight_layout =
            layout == Layout::Transposed ? Layout::Transposed : Layout::Contiguous;
        Primitive px = make_primitive(x, c.x, dtype, layout, device);
        Primitive pw = make_primitive(w, c.weight, dtype, weight_layout, device);
        Primitive pg = make_primitive(g, y_shape, dtype,
                                      layout == Layout::Offset ? Layout::Strided : layout, device);
        std::optional<Primitive> pb;
        if (c.bias) pb = make_primitive(b, Shape{c.weight[0]}, dtype, Layout::Contiguous, device);
        ConvOptions options{c.stride, c.padding, c.dilation, c.groups};
        check(detail::conv(px, pw, pb, options, dims), y_shape, dtype, representable(y, dtype),
              what + " forward", 8);
        const ConvOptions full{stride, padding, dilation, c.groups};
        check(backend.conv_x_backward(px, pw, pg, full), c.x, dtype, representable(dx, dtype),
              what + " x grad", 8);
        check(backend.conv_weight_backward(px, pw, pg, full), c.weight, dtype,
              representable(dw, dtype), what + " weight grad", 8);
        check(backend.conv_bias_backward(pg), Shape{c.weight[0]}, dtype, representable(db, dtype),
              what + " bias grad", 8);
      }
    }
  }
}

struct ConvTransposeCase {
  Shape x;
  Shape weight;  // [C_in, C_out / groups, k...]
  Sizes stride, padding, padding_out, dilation;
  std::int64_t groups = 1;
  bool bias = false;
};

KILN_CONFORMANCE_ROW(conv_transpose, ({"conv_transpose"})) {
  const std::vector<ConvTransposeCase> cases = {
      {{2, 4, 5}, {4, 3, 3}, {2}, {1}, {1}, {}, 1, true},
      // padding_out (1) >= stride (1) is allowed by dilation 2 in the last dim.
      {{1, 4, 3, 4}, {4, 2, 3, 2}, {2, 1}, {1, 0}, {1, 1}, {1, 2}, 2, true},
      {{1, 2, 2, 3, 2}, {2, 2, 2, 2, 3}, {2, 2, 1}, {}, {}, {}, 1, false},
      {{2, 3, 4, 4}, {3, 5, 1, 1}, {}, {}, {}, {}, 1, false},
  };
  std::uint64_t seed = 500;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const ConvTransposeCase& c = cases[ci];
    const std::size_t dims = c.x.rank() - 2;
    const Sizes stride = filled(c.stride, dims, 1), padding = filled(c.padding, dims, 0);
    const Sizes padding_out = filled(c.padding_out, dims, 0),
                dilation = filled(c.dilation, dims, 1);
    Sizes out_spatial;
    for (std::size_t d = 0; d < dims; ++d) {
      out_spatial.push_back((c.x[2 + d] - 1) * stride[d] - 2 * padding[d] +
                            dilation[d] * (c.weight[2 + d] - 1) + padding_out[d] + 1);
    }
    const std::int64_t out_channels = c.weight[1] * c.groups;
    const Shape y_shape = with_spatial(c.x[0], out_channels, out_spatial);
    std::vector<DType> dtypes(std::begin(kMainDTypes), std::end(kMainDTypes));
    if (ci == 1) dtypes.insert(dtypes.end(), std::begin(kHalfDTypes), std::end(kHalfDTypes));
    for (DType dtype : dtypes) {
      for (Layout layout : kLayouts) {
        const std::string what =
            "conv_transpose case " + std::to_string(ci) + " " + context(device, dtype, layout, c.x);
        const Values x = random_values(c.x, dtype, seed++, -1, 1);
        const Values w = random_values(c.weight, dtype, seed++, -1, 1);
        const Values b = random_values(Shape{out_channels}, dtype, seed++, -1, 1);
        // The transpose scatters each input position through the kernel: the terms of a
        // convolution reading the output (as its image) into the input's grid.
        Values y = zeros(y_shape);
        for_each_conv_term(y_shape, c.x, c.weight, stride, padding, dilation, c.groups,
                           [&](std::int64_t i, std::int64_t o, std::int64_t k) {
                             y[static_cast<std::size_t>(i)] +=
                                 x[static_cast<std::size_t>(o)] * w[static_cast<std::size_t>(k)];
                           });
        if (c.bias) {
          for (std::int64_t i = 0; i < y_shape.num_elements(); ++i) {
            y[static_cast<std::size_t>(i)] += b[static_cast<std::size_t>(unravel(i, y_shape)[1])];
          }
        }
        Primitive px = make_primitive(x, c.x, dtype, layout, device);
        Primitive pw = make_primitive(
            w, c.weight, dtype, layout == Layout::Strided ? Layout::Strided : Layout::Contiguous,
            device);
        std::optional<Primitive> pb;
        if (c.bias) pb = make_primitive(b, Shape{out_channels}, dtype, Layout::Contiguous, device);
        ConvTransposeOptions options{c.stride, c.padding, c.padding_out, c.dilation, c.groups};
        check(detail::conv_transpose(px, pw, pb, options, dims), y_shape, dtype,
              representable(y, dtype), what, 8);
      }
    }
  }
}

// ---- pooling -------------------------------------------------------------------------------

std::int64_t pool_out(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p,
                      std::int64_t d, bool ceil_mode) {
  const double span = static_cast<double>(in + 2 * p - d * (k - 1) - 1) / static_cast<double>(s);
  std::int64_t out = static_cast<std::int64_t>(ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

struct PoolCase {
  Shape x;
  PoolOptions options;  // as given to the tensor layer
};

// Options with the defaults spelled out (stride = kernel_size, padding 0, dilation 1).
PoolOptions filled(PoolOptions o) {
  const std::size_t dims = o.kernel_size.size();
  if (o.stride.empty()) o.stride = o.kernel_size;
  o.padding = filled(o.padding, dims, 0);
  o.dilation = filled(o.dilation, dims, 1);
  return o;
}

Shape pool_shape(const Shape& x, const PoolOptions& o) {
  Sizes out;
  for (std::size_t d = 0; d < o.kernel_size.size(); ++d) {
    out.push_back(pool_out(x[2 + d], o.kernel_size[d], o.stride[d], o.padding[d], o.dilation[d],
                           o.ceil_mode));
  }
  return with_spatial(x[0], x[1], out);
}

// The image positions (flat, within the whole tensor) each output position of a pooling
// window covers, in window order, skipping the padding; and PyTorch's average divisor.
struct PoolWindow {
  std::vector<std::int64_t> positions;
  std::int64_t padded_count = 1;  // window size clipped to the padded input
};

PoolWindow pool_window(const Shape& x, const Shape& y, const PoolOptions& o, std::int64_t out) {
  const std::size_t dims = o.kernel_size.size();
  const auto oi = unravel(out, y);
  PoolWindow window;
  Shape kernel(o.kernel_size);
  for (std::size_t d = 0; d < dims; ++d) {
    const std::int64_t start = oi[2 + d] * o.stride[d] - o.padding[d];
    const std::int64_t end = std::min(start + o.kernel_size[d], x[2 + d] + o.padding[d]);
    window.padded_count *= end - start;
  }
  for (std::int64_t k = 0; k < kernel.num_elements(); ++k) {
    const auto ki = unravel(k, kernel);
    std::vector<std::int64_t> ii{oi[0], oi[1]};
    bool inside = true;
    for (std::size_t d = 0; d < dims; ++d) {
      const std::int64_t pos = oi[2 + d] * o.stride[d] - o.padding[d] + ki[d] * o.dilation[d];
      inside = inside && pos >= 0 && pos < x[2 + d];
      ii.push_back(pos);
    }
    if (inside) window.positions.push_back(ravel(ii, x));
  }
  return window;
}

// Flat index within the spatial plane of a flat tensor index.
std::int64_t in_plane(std::int64_t flat, const Shape& x) {
  return flat % spatial_shape(x).num_elements();
}

KILN_CONFORMANCE_ROW(avg_pool, ({"avg_pool", "avg_pool_backward"})) {
  const std::vector<PoolCase> cases = {
      {{2, 3, 9}, {.kernel_size = {3}, .stride = {2}, .padding = {1}}},
      {{1, 2, 8},
       {.kernel_size = {3},
        .stride = {2},
        .padding = {1},
        .ceil_mode = true,
        .count_include_pad = false}},
      {{2, 2, 7, 6},
       {.kernel_size = {3, 2}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true}},
      {{1, 3, 5, 5}, {.kernel_size = {2, 2}, .count_include_pad = false}},
      {{1, 2, 4, 5, 3},
       {.kernel_size = {2, 3, 2},
        .stride = {2, 2, 1},
        .padding = {1, 1, 0},
        .ceil_mode = true,
        .count_include_pad = false}},
  };
  Backend& backend = backend_for(device);
  std::uint64_t seed = 900;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const PoolOptions o = filled(cases[ci].options);
    const Shape& xs = cases[ci].x;
    const Shape ys = pool_shape(xs, o);
    std::vector<DType> dtypes(std::begin(kMainDTypes), std::end(kMainDTypes));
    if (ci == 2) dtypes.insert(dtypes.end(), std::begin(kHalfDTypes), std::end(kHalfDTypes));
    for (DType dtype : dtypes) {
      for (Layout layout : kLayouts) {
        const std::string what =
            "avg_pool case " + std::to_string(ci) + " " + context(device, dtype, layout, xs);
        const Values x = random_values(xs, dtype, seed++);
        const Values g = random_values(ys, dtype, seed++);
        Values y = zeros(ys), dx = zeros(xs);
        for (std::int64_t out = 0; out < ys.num_elements(); ++out) {
          const PoolWindow win = pool_window(xs, ys, o, out);
          const double divisor = static_cast<double>(
              o.count_include_pad ? win.padded_count
                                  : static_cast<std::int64_t>(win.positions.size()));
          for (std::int64_t i : win.positions) {
            y[static_cast<std::size_t>(out)] += x[static_cast<std::size_t>(i)] / divisor;
            dx[static_cast<std::size_t>(i)] += g[static_cast<std::size_t>(out)] / divisor;
          }
        }
        Primitive px = make_primitive(x, xs, dtype, layout, device);
        Primitive pg = make_primitive(g, ys, dtype, layout, device);
        const std::size_t dims = xs.rank() - 2;
        check(detail::avg_pool(px, cases[ci].options, dims), ys, dtype, representable(y, dtype),
              what);
        check(backend.avg_pool_backward(px, pg, o), xs, dtype, representable(dx, dtype),
              what + " backward");
      }
    }
  }
}

KILN_CONFORMANCE_ROW(max_pool,
                     ({"max_pool", "max_pool_with_indices", "max_pool_with_indices_backward"})) {
  const std::vector<PoolCase> cases = {
      {{2, 3, 10},
       {.kernel_size = {3}, .stride = {2}, .padding = {1}, .dilation = {2}, .ceil_mode = true}},
      {{2, 2, 7, 6}, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}},
      {{1, 2, 6, 7},
       {.kernel_size = {2, 3},
        .stride = {1, 2},
        .padding = {1, 1},
        .dilation = {2, 1},
        .ceil_mode = true}},
      {{1, 1, 4, 5, 4}, {.kernel_size = {2, 2, 2}}},
      {{0, 2, 4, 4}, {.kernel_size = {2, 2}}},
      // The 2x2 window at stride 2 (the CPU's own loop for it), an odd width left over.
      {{2, 3, 6, 9}, {.kernel_size = {2, 2}}},
  };
  Backend& backend = backend_for(device);
  std::uint64_t seed = 1300;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const PoolOptions o = filled(cases[ci].options);
    const Shape& xs = cases[ci].x;
    const Shape ys = pool_shape(xs, o);
    std::vector<DType> dtypes(std::begin(kMainDTypes), std::end(kMainDTypes));
    if (ci == 1) dtypes.insert(dtypes.end(), std::begin(kHalfDTypes), std::end(kHalfDTypes));
    for (DType dtype : dtypes) {
      for (Layout layout : kLayouts) {
        const std::string what =
            "max_pool case " + std::to_string(ci) + " " + context(device, dtype, layout, xs);
        Values x = random_values(xs, dtype, seed++);
        // A NaN wins its windows (case 1, contiguous): values and indices follow it.
        if (ci == 1 && layout == Layout::Contiguous)
          x[9] = std::numeric_limits<double>::quiet_NaN();
        // Case 5: a window whose first tap is -inf, and one with two NaNs (the later one wins).
        if (ci == 5 && layout == Layout::Contiguous && is_float(dtype)) {
          x[0] = -std::numeric_limits<double>::infinity();
          x[2] = x[12] = std::numeric_limits<double>::quiet_NaN();
        }
        const Values g = random_values(ys, dtype, seed++);
        Values y = zeros(ys), index = zeros(ys), dx = zeros(xs);
        for (std::int64_t out = 0; out < ys.num_elements(); ++out) {
          const PoolWindow win = pool_window(xs, ys, o, out);
          double best = -std::numeric_limits<double>::infinity();
          std::int64_t best_at = win.positions.front();
          for (std::int64_t i : win.positions) {
            const double v = x[static_cast<std::size_t>(i)];
            if (v > best || std::isnan(v)) best = v, best_at = i;
          }
          y[static_cast<std::size_t>(out)] = best;
          index[static_cast<std::size_t>(out)] = static_cast<double>(in_plane(best_at, xs));
          dx[static_cast<std::size_t>(best_at)] += g[static_cast<std::size_t>(out)];
        }
        Primitive px = make_primitive(x, xs, dtype, layout, device);
        Primitive pg = make_primitive(g, ys, dtype, layout, device);
        const std::size_t dims = xs.rank() - 2;
        check(detail::max_pool(px, cases[ci].options, dims), ys, dtype, y, what + " values");
        auto [values, indices] = detail::max_pool_with_indices(px, cases[ci].options, dims);
        check(values, ys, dtype, y, what + " with_indices values");
        const DType index_dtype = detail::default_dtype(device, Kind::Int);
        check(indices, ys, index_dtype, index, what + " indices");
        check(backend.max_pool_with_indices_backward(px, pg, indices, o), xs, dtype,
              representable(dx, dtype), what + " backward");
      }
    }
  }
}

KILN_CONFORMANCE_ROW(adaptive_avg_pool, ({"adaptive_avg_pool", "adaptive_avg_pool_backward"})) {
  const std::vector<std::pair<Shape, Sizes>> cases = {
      {{2, 3, 10}, {4}},      {{1, 2, 7, 5}, {3, 4}},
      {{1, 1, 3, 2}, {5, 4}}, {{1, 2, 5, 4, 3}, {2, 3, 2}},
      {{0, 2, 3, 3}, {2, 2}},
  };
  Backend& backend = backend_for(device);
  std::uint64_t seed = 1700;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const auto& [xs, out_size] = cases[ci];
    const Shape ys = with_spatial(xs[0], xs[1], out_size);
    const std::size_t dims = out_size.size();
    std::vector<DType> dtypes(std::begin(kMainDTypes), std::end(kMainDTypes));
    if (ci == 1) dtypes.insert(dtypes.end(), std::begin(kHalfDTypes), std::end(kHalfDTypes));
    for (DType dtype : dtypes) {
      for (Layout layout : kLayouts) {
        const std::string what = "adaptive_avg_pool case " + std::to_string(ci) + " " +
                                 context(device, dtype, layout, xs);
        const Values x = random_values(xs, dtype, seed++);
        const Values g = random_values(ys, dtype, seed++);
        Values y = zeros(ys), dx = zeros(xs);
        for (std::int64_t out = 0; out < ys.num_elements(); ++out) {
          const auto oi = unravel(out, ys);
          Sizes start, extent;
          for (std::size_t d = 0; d < dims; ++d) {
            const double in = static_cast<double>(xs[2 + d]), n = static_cast<double>(out_size[d]);
            const auto s =
                static_cast<std::int64_t>(std::floor(static_cast<double>(oi[2 + d]) * in / n));
            const auto e =
                static_cast<std::int64_t>(std::ceil(static_cast<double>(oi[2 + d] + 1) * in / n));
            start.push_back(s);
            extent.push_back(e - s);
          }
          const Shape window(extent);
          for (std::int64_t k = 0; k < window.num_elements(); ++k) {
            const auto ki = unravel(k, window);
            std::vector<std::int64_t> ii{oi[0], oi[1]};
            for (std::size_t d = 0; d < dims; ++d) ii.push_back(start[d] + ki[d]);
            const auto i = static_cast<std::size_t>(ravel(ii, xs));
            const double count = static_cast<double>(window.num_elements());
            y[static_cast<std::size_t>(out)] += x[i] / count;
            dx[i] += g[static_cast<std::size_t>(out)] / count;
          }
        }
        Primitive px = make_primitive(x, xs, dtype, layout, device);
        Primitive pg = make_primitive(g, ys, dtype, layout, device);
        check(detail::adaptive_avg_pool(px, out_size), ys, dtype, representable(y, dtype), what);
        check(backend.adaptive_avg_pool_backward(px, pg), xs, dtype, representable(dx, dtype),
              what + " backward");
      }
    }
  }
}

// ---- interpolation -------------------------------------------------------------------------

// The input rows (or columns) output position i reads along one axis, with weights.
std::vector<std::pair<std::int64_t, double>> interpolation_taps(std::int64_t i, std::int64_t in,
                                                                std::int64_t out,
                                                                InterpolateOptions o) {
  const double scale = o.align_corners ? (out > 1 ? double(in - 1) / double(out - 1) : 0.0)
                                       : double(in) / double(out);
  const double src = o.align_corners ? scale * double(i) : scale * (double(i) + 0.5) - 0.5;
  const auto clamp = [&](std::int64_t v) { return std::clamp<std::int64_t>(v, 0, in - 1); };
  switch (o.mode) {
    case InterpolateMode::Nearest:
      return {
          {std::min<std::int64_t>(
               static_cast<std::int64_t>(std::floor(double(i) * double(in) / double(out))), in - 1),
           1.0}};
    case InterpolateMode::Bilinear: {
      const double s = std::max(src, 0.0);
      const auto i0 = static_cast<std::int64_t>(std::floor(s));
      const double t = s - double(i0);
      return {{clamp(i0), 1 - t}, {clamp(i0 + 1), t}};
    }
    case InterpolateMode::Bicubic: {
      const auto i0 = static_cast<std::int64_t>(std::floor(src));
      const double t = src - double(i0);
      // Keys' cubic convolution with A = -0.75 at distances 1 + t, t, 1 - t, 2 - t.
      const double a = -0.75;
      const auto kernel = [a](double x) {
        x = std::fabs(x);
        if (x <= 1) return (a + 2) * x * x * x - (a + 3) * x * x + 1;
        if (x < 2) return a * x * x * x - 5 * a * x * x + 8 * a * x - 4 * a;
        return 0.0;
      };
      return {{clamp(i0 - 1), kernel(1 + t)},
              {clamp(i0), kernel(t)},
              {clamp(i0 + 1), kernel(1 - t)},
              {clamp(i0 + 2), kernel(2 - t)}};
    }
  }
  return {};
}

KILN_CONFORMANCE_ROW(interpolate, ({"interpolate", "interpolate_backward"})) {
  const Shape xs{2, 2, 5, 4};
  const std::vector<Sizes> sizes = {{7, 3}, {3, 6}, {5, 4}, {1, 1}, {10, 8}};
  Backend& backend = backend_for(device);
  std::uint64_t seed = 2100;
  for (InterpolateMode mode :
       {InterpolateMode::Nearest, InterpolateMode::Bilinear, InterpolateMode::Bicubic}) {
    for (bool align : {false, true}) {
      if (mode == InterpolateMode::Nearest && align) continue;  // nearest has no corner rule
      const InterpolateOptions o{mode, align};
      for (std::size_t si = 0; si < sizes.size(); ++si) {
        const Sizes& size = sizes[si];
        const Shape ys{xs[0], xs[1], size[0], size[1]};
        std::vector<DType> dtypes(std::begin(kMainDTypes), std::end(kMainDTypes));
        if (si == 0) dtypes.insert(dtypes.end(), std::begin(kHalfDTypes), std::end(kHalfDTypes));
        for (DType dtype : dtypes) {
          for (Layout layout : kLayouts) {
            const std::string what = "interpolate mode " + std::to_string(static_cast<int>(mode)) +
                                     (align ? " align_corners " : " ") + sizes_text(size) + " " +
                                     context(device, dtype, layout, xs);
            const Values x = random_values(xs, dtype, seed++);
            const Values g = random_values(ys, dtype, seed++);
            Values y = zeros(ys), dx = zeros(xs);
            for (std::int64_t out = 0; out < ys.num_elements(); ++out) {
              const auto oi = unravel(out, ys);
              for (const auto& [ih, wh] : interpolation_taps(oi[2], xs[2], ys[2], o)) {
                for (const auto& [iw, ww] : interpolation_taps(oi[3], xs[3], ys[3], o)) {
                  const auto i = static_cast<std::size_t>(ravel({oi[0], oi[1], ih, iw}, xs));
                  y[static_cast<std::size_t>(out)] += wh * ww * x[i];
                  dx[i] += wh * ww * g[static_cast<std::size_t>(out)];
                }
              }
            }
            Primitive px = make_primitive(x, xs, dtype, layout, device);
            Primitive pg = make_primitive(g, ys, dtype, layout, device);
            check(detail::interpolate(px, size, o), ys, dtype, representable(y, dtype), what, 2);
            check(backend.interpolate_backward(px, pg, size, o), xs, dtype,
                  representable(dx, dtype), what + " backward", 4);
          }
        }
      }
    }
  }
}

// ---- unfold / fold -------------------------------------------------------------------------

KILN_CONFORMANCE_ROW(unfold_fold, ({"unfold_patches", "fold_patches"})) {
  const std::vector<std::pair<Shape, UnfoldOptions>> cases = {
      {{2, 3, 6, 5},
       {.kernel_size = {3, 2}, .stride = {2, 1}, .padding = {1, 1}, .dilation = {1, 2}}},
      {{1, 2, 4, 4}, {.kernel_size = {2, 2}}},
      {{1, 1, 5, 3}, {.kernel_size = {1, 3}, .stride = {2, 3}, .padding = {0, 1}}},
  };
  std::uint64_t seed = 2500;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const auto& [xs, given] = cases[ci];
    UnfoldOptions o = given;
    o.stride = filled(o.stride, 2, 1);
    o.padding = filled(o.padding, 2, 0);
    o.dilation = filled(o.dilation, 2, 1);
    // The terms of a depthwise convolution with a one-hot kernel: column row (c, kh, kw).
    const std::int64_t taps = o.kernel_size[0] * o.kernel_size[1];
    Sizes grid;
    for (std::size_t d = 0; d < 2; ++d) {
      grid.push_back((xs[2 + d] + 2 * o.padding[d] - o.dilation[d] * (o.kernel_size[d] - 1) - 1) /
                         o.stride[d] +
                     1);
    }
    const Shape cs{xs[0], xs[1] * taps, grid[0] * grid[1]};
    std::vector<DType> dtypes(std::begin(kMainDTypes), std::end(kMainDTypes));
    if (ci == 0) dtypes.insert(dtypes.end(), std::begin(kHalfDTypes), std::end(kHalfDTypes));
    for (DType dtype : dtypes) {
      for (Layout layout : kLayouts) {
        const std::string what =
            "unfold case " + std::to_string(ci) + " " + context(device, dtype, layout, xs);
        const Values x = random_values(xs, dtype, seed++);
        const Values cols = random_values(cs, dtype, seed++);
        Values unfolded = zeros(cs), folded = zeros(xs);
        for (std::int64_t n = 0; n < xs[0]; ++n) {
          for (std::int64_t c = 0; c < xs[1]; ++c) {
            for (std::int64_t k = 0; k < taps; ++k) {
              const std::int64_t kh = k / o.kernel_size[1], kw = k % o.kernel_size[1];
              for (std::int64_t l = 0; l < grid[0] * grid[1]; ++l) {
                const std::int64_t h =
                    (l / grid[1]) * o.stride[0] - o.padding[0] + kh * o.dilation[0];
                const std::int64_t w =
                    (l % grid[1]) * o.stride[1] - o.padding[1] + kw * o.dilation[1];
                if (h < 0 || h >= xs[2] || w < 0 || w >= xs[3]) continue;
                const auto col = static_cast<std::size_t>(ravel({n, c * taps + k, l}, cs));
                const auto i = static_cast<std::size_t>(ravel({n, c, h, w}, xs));
                unfolded[col] = x[i];
                folded[i] += cols[col];
              }
            }
          }
        }
        Primitive px = make_primitive(x, xs, dtype, layout, device);
        Primitive pc = make_primitive(cols, cs, dtype, layout, device);
        check(detail::unfold_patches(px, given), cs, dtype, unfolded, what + " unfold");
        check(detail::fold_patches(pc, {xs[2], xs[3]}, given), xs, dtype,
              representable(folded, dtype), what + " fold", 2);
      }
    }
  }
}

}  // namespace
}  // namespace kiln::conformance
