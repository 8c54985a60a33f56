// The CPU convolution kernels on shapes large enough to split into parallel tasks (the
// conformance rows are small and mostly run on one thread), against direct float64 loops.
#include <cblas.h>
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <array>
#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include "backends/cpu/conv_dnnl.h"
#include "runtime/registry.h"
#include "tensor/common.h"

namespace {

using namespace kiln;

struct Case {
  std::int64_t batch, in_channels, out_channels, height, width, kernel, padding, groups;
};

std::vector<double> random_vector(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<double> v(n);
  for (double& x : v) x = static_cast<float>(dist(rng));  // exact in f32 too
  return v;
}

Primitive tensor(const std::vector<double>& values, Shape shape, DType dtype) {
  return detail::from_data(TensorData::from_vec(values, shape).convert(dtype), Device::cpu(),
                           Kind::Float, shape.rank());
}

void expect_near_all(const Primitive& actual, const std::vector<double>& expected, double tol,
                     const std::string& what) {
  const std::vector<double> got = detail::into_data(actual).to_f64_vec();
  ASSERT_EQ(got.size(), expected.size()) << what;
  int reported = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - expected[i]) > tol * (1 + std::fabs(expected[i])) && reported++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected "
                    << expected[i];
    }
  }
}

TEST(CpuConv, ParallelTasksMatchReference) {
  backend_for(Device::cpu());  // the backend fixes OpenBLAS's thread count when it starts
  const int blas_threads = openblas_get_num_threads();
  // The last case has a weight gradient above the per-thread copy limit in f64 (4.7 MB), so
  // f32 and f64 take the two weight-gradient strategies.
  for (const Case& c : {Case{4, 16, 32, 24, 24, 3, 1, 2}, Case{3, 32, 32, 24, 20, 1, 0, 1},
                        Case{1, 256, 256, 4, 4, 3, 0, 1}}) {
    for (DType dtype : {DType::F32, DType::F64}) {
      const std::int64_t in_g = c.in_channels / c.groups, out_g = c.out_channels / c.groups;
      const std::int64_t oh = c.height + 2 * c.padding - c.kernel + 1;
      const std::int64_t ow = c.width + 2 * c.padding - c.kernel + 1;
      const Shape xs{c.batch, c.in_channels, c.height, c.width};
      const Shape ws{c.out_channels, in_g, c.kernel, c.kernel};
      const Shape ys{c.batch, c.out_channels, oh, ow};
      const auto x = random_vector(static_cast<std::size_t>(xs.num_elements()), 1);
      const auto w = random_vector(static_cast<std::size_t>(ws.num_elements()), 2);
      const auto g = random_vector(static_cast<std::size_t>(ys.num_elements()), 3);
      const auto bias = random_vector(static_cast<std::size_t>(c.out_channels), 4);
      std::vector<double> y(g.size()), dx(x.size()), dw(w.size());
      for (std::int64_t n = 0; n < c.batch; ++n)
        for (std::int64_t co = 0; co < c.out_channels; ++co)
          for (std::int64_t i = 0; i < oh; ++i)
            for (std::int64_t j = 0; j < ow; ++j) {
              const std::size_t o =
                  static_cast<std::size_t>(((n * c.out_channels + co) * oh + i) * ow + j);
              double sum = bias[static_cast<std::size_t>(co)];
              for (std::int64_t ci = 0; ci < in_g; ++ci)
                for (std::int64_t a = 0; a < c.kernel; ++a)
                  for (std::int64_t b = 0; b < c.kernel; ++b) {
                    const std::int64_t h = i - c.padding + a, v = j - c.padding + b;
                    if (h < 0 || h >= c.height || v < 0 || v >= c.width) continue;
                    const std::int64_t channel = (co / out_g) * in_g + ci;
                    const auto xi = static_cast<std::size_t>(
                        ((n * c.in_channels + channel) * c.height + h) * c.width + v);
                    const auto wi =
                        static_cast<std::size_t>(((co * in_g + ci) * c.kernel + a) * c.kernel + b);
                    sum += x[xi] * w[wi];
                    dx[xi] += g[o] * w[wi];
                    dw[wi] += g[o] * x[xi];
                  }
              y[o] = sum;
            }
      const std::string what = "case " + std::to_string(c.in_channels) + "x" +
                               std::to_string(c.kernel) + " " + std::string(dtype_name(dtype));
      const double tol = dtype == DType::F32 ? 1e-4 : 1e-10;
      Primitive px = tensor(x, xs, dtype), pw = tensor(w, ws, dtype), pg = tensor(g, ys, dtype);
      Primitive pb = tensor(bias, Shape{c.out_channels}, dtype);
      const ConvOptions options{{1, 1}, {c.padding, c.padding}, {1, 1}, c.groups};
      Backend& backend = backend_for(Device::cpu());
      expect_near_all(detail::conv(px, pw, pb, options, 2), y, tol, what + " forward");
      expect_near_all(backend.conv_x_backward(px, pw, pg, options), dx, tol, what + " x grad");
      expect_near_all(backend.conv_weight_backward(px, pw, pg, options), dw, tol, what + " w grad");
      // The transpose of this same-size convolution is its input gradient.
      const ConvTransposeOptions transpose{
          {1, 1}, {c.padding, c.padding}, {0, 0}, {1, 1}, c.groups};
      // The conv weight [C_out, C_in / groups, k, k] is the transpose's [C_in', C_out' / groups,
      // k, k] for the input g with C_in' = C_out channels.
      expect_near_all(detail::conv_transpose(pg, pw, std::nullopt, transpose, 2), dx, tol,
                      what + " transpose");
    }
  }
  EXPECT_EQ(openblas_get_num_threads(), blas_threads) << "the BLAS thread count was not restored";
}

// A convolution over 1-3 spatial dims (the arrays right-aligned: unused leading dims are 1).
struct Geometry {
  std::size_t dims;
  std::int64_t batch, in_channels, out_channels, groups;
  std::array<std::int64_t, 3> in, kernel, stride, padding, dilation;

  std::int64_t out(std::size_t d) const {
    return (in[d] + 2 * padding[d] - dilation[d] * (kernel[d] - 1) - 1) / stride[d] + 1;
  }
  // [lead0, lead1, spatial...] keeping `dims` spatial dims.
  Shape shape(std::int64_t lead0, std::int64_t lead1, const std::array<std::int64_t, 3>& s) const {
    detail::DimVector v{lead0, lead1};
    for (std::size_t d = 3 - dims; d < 3; ++d) v.push_back(s[d]);
    return Shape(std::move(v));
  }
  std::array<std::int64_t, 3> out_extent() const { return {out(0), out(1), out(2)}; }
  std::vector<std::int64_t> option(const std::array<std::int64_t, 3>& values) const {
    return {values.begin() + static_cast<std::ptrdiff_t>(3 - dims), values.end()};
  }
};

// y = conv(x, w) + bias, dx and dw for output gradient g, by direct float64 loops.
struct Reference {
  std::vector<double> y, dx, dw;
};
Reference reference(const Geometry& c, const std::vector<double>& x, const std::vector<double>& w,
                    const std::vector<double>& bias, const std::vector<double>& g) {
  const std::int64_t in_g = c.in_channels / c.groups, out_g = c.out_channels / c.groups;
  const auto o = c.out_extent();
  const std::int64_t plane = o[0] * o[1] * o[2], image = c.in[0] * c.in[1] * c.in[2];
  const std::int64_t taps = c.kernel[0] * c.kernel[1] * c.kernel[2];
  Reference r{std::vector<double>(g.size()), std::vector<double>(x.size()),
              std::vector<double>(w.size())};
  for (std::int64_t n = 0; n < c.batch; ++n)
    for (std::int64_t co = 0; co < c.out_channels; ++co)
      for (std::int64_t p = 0; p < plane; ++p) {
        const std::int64_t pos[3] = {p / (o[1] * o[2]), p / o[2] % o[1], p % o[2]};
        const auto yi = static_cast<std::size_t>((n * c.out_channels + co) * plane + p);
        double sum = bias.empty() ? 0.0 : bias[static_cast<std::size_t>(co)];
        for (std::int64_t ci = 0; ci < in_g; ++ci)
          for (std::int64_t t = 0; t < taps; ++t) {
            const std::int64_t tap[3] = {t / (c.kernel[1] * c.kernel[2]),
                                         t / c.kernel[2] % c.kernel[1], t % c.kernel[2]};
            std::int64_t at = 0;
            bool inside = true;
            for (std::size_t d = 0; d < 3; ++d) {
              const std::int64_t i = pos[d] * c.stride[d] - c.padding[d] + tap[d] * c.dilation[d];
              inside = inside && i >= 0 && i < c.in[d];
              at = at * c.in[d] + i;
            }
            if (!inside) continue;
            const std::int64_t channel = (co / out_g) * in_g + ci;
            const auto xi = static_cast<std::size_t>((n * c.in_channels + channel) * image + at);
            const auto wi = static_cast<std::size_t>((co * in_g + ci) * taps + t);
            sum += x[xi] * w[wi];
            r.dx[xi] += g[yi] * w[wi];
            r.dw[wi] += g[yi] * x[xi];
          }
        r.y[yi] = sum;
      }
  return r;
}

// The convolution, its gradients and its transpose (the input gradient, plus a bias) on the CPU
// backend against the float64 loops, in each of dtypes: in f32 these run on oneDNN's primitives
// where kiln has it, in f64 on the im2col path. For each of `views`, true: x and g are
// non-contiguous views (the first two dims swapped in memory).
void check_geometry(const Geometry& c, std::initializer_list<DType> dtypes,
                    std::initializer_list<bool> views, const std::string& what) {
  const Shape xs = c.shape(c.batch, c.in_channels, c.in);
  const Shape ws = c.shape(c.out_channels, c.in_channels / c.groups, c.kernel);
  const Shape ys = c.shape(c.batch, c.out_channels, c.out_extent());
  const auto x = random_vector(static_cast<std::size_t>(xs.num_elements()), 11);
  const auto w = random_vector(static_cast<std::size_t>(ws.num_elements()), 12);
  const auto g = random_vector(static_cast<std::size_t>(ys.num_elements()), 13);
  const auto bias = random_vector(static_cast<std::size_t>(c.out_channels), 14);
  const Reference want = reference(c, x, w, bias, g);
  // The transpose of g whose output has x's extent (padding_out gives the remainder the
  // convolution's division dropped) is the input gradient, plus its bias.
  std::array<std::int64_t, 3> padding_out{};
  for (std::size_t d = 0; d < 3; ++d) {
    padding_out[d] = c.in[d] - ((c.out(d) - 1) * c.stride[d] - 2 * c.padding[d] +
                                c.dilation[d] * (c.kernel[d] - 1) + 1);
  }
  const auto transpose_bias = random_vector(static_cast<std::size_t>(c.in_channels), 15);
  std::vector<double> transposed = want.dx;
  const std::int64_t image = xs.num_elements() / std::max<std::int64_t>(1, c.batch * c.in_channels);
  for (std::size_t i = 0; i < transposed.size(); ++i)
    transposed[i] += transpose_bias[i / static_cast<std::size_t>(image) %
                                    static_cast<std::size_t>(c.in_channels)];
  const ConvOptions options{c.option(c.stride), c.option(c.padding), c.option(c.dilation),
                            c.groups};
  const ConvTransposeOptions transpose{c.option(c.stride), c.option(c.padding),
                                       c.option(padding_out), c.option(c.dilation), c.groups};
  Backend& backend = backend_for(Device::cpu());
  for (DType dtype : dtypes) {
    for (bool permuted : views) {
      // values of [a, b, rest] stored as [b, a, rest], viewed back as [a, b, rest]
      const auto input = [&](const std::vector<double>& v, const Shape& shape) {
        if (!permuted) return tensor(v, shape, dtype);
        const std::int64_t a = shape[0], b = shape[1],
                           rest = shape.num_elements() / std::max<std::int64_t>(1, a * b);
        std::vector<double> swapped(v.size());
        for (std::int64_t i = 0; i < a; ++i)
          for (std::int64_t j = 0; j < b; ++j)
            for (std::int64_t k = 0; k < rest; ++k)
              swapped[static_cast<std::size_t>((j * a + i) * rest + k)] =
                  v[static_cast<std::size_t>((i * b + j) * rest + k)];
        detail::DimVector dims;
        for (std::int64_t d : shape.dims()) dims.push_back(d);
        std::swap(dims[0], dims[1]);
        std::vector<std::int64_t> axes(shape.rank());
        for (std::size_t d = 0; d < axes.size(); ++d) axes[d] = static_cast<std::int64_t>(d);
        std::swap(axes[0], axes[1]);
        return detail::permute(tensor(swapped, Shape(std::move(dims)), dtype), axes);
      };
      const std::string label =
          what + " " + std::string(dtype_name(dtype)) + (permuted ? " permuted" : "");
      const Primitive px = input(x, xs), pg = input(g, ys), pw = tensor(w, ws, dtype);
      const Primitive pb = tensor(bias, Shape{c.out_channels}, dtype);
      const double tol = dtype == DType::F64 ? 1e-10 : 1e-4;
      expect_near_all(detail::conv(px, pw, pb, options, c.dims), want.y, tol, label + " forward");
      expect_near_all(backend.conv_x_backward(px, pw, pg, options), want.dx, tol,
                      label + " x grad");
      expect_near_all(backend.conv_weight_backward(px, pw, pg, options), want.dw, tol,
                      label + " w grad");
      expect_near_all(
          detail::conv_transpose(pg, pw, tensor(transpose_bias, Shape{c.in_channels}, dtype),
                                 transpose, c.dims),
          transposed, tol, label + " transpose");
    }
  }
}

TEST(CpuConv, GeometriesMatchReference) {
  // {dims, batch, in, out, groups, in extent, kernel, stride, padding, dilation}
  const std::vector<Geometry> cases{
      {2, 4, 16, 32, 1, {1, 13, 11}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}},
      {2, 3, 12, 8, 4, {1, 9, 10}, {1, 3, 2}, {1, 2, 3}, {0, 1, 0}, {1, 2, 1}},
      {2, 2, 8, 8, 8, {1, 12, 12}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}},  // depthwise
      {1, 5, 6, 10, 2, {1, 1, 40}, {1, 1, 5}, {1, 1, 2}, {0, 0, 3}, {1, 1, 2}},
      {3, 2, 4, 6, 1, {6, 7, 5}, {3, 2, 3}, {2, 1, 1}, {1, 0, 2}, {1, 2, 1}},
      {2, 3, 8, 16, 1, {1, 16, 16}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}},  // pointwise
      // stride 2 over an odd extent without padding: the last row never read
      {2, 2, 16, 16, 1, {1, 15, 15}, {1, 2, 2}, {1, 2, 2}, {0, 0, 0}, {1, 1, 1}},
      // One image: blocks of channels (32 + 32, 32 + 16, 16 + 4 / 32 + 8) or of groups
      // (16 + 16 depthwise, 2 + 1 groups) rather than of images.
      {2, 1, 64, 64, 1, {1, 12, 12}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}},
      {2, 1, 48, 48, 1, {1, 12, 12}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}},
      {1, 1, 40, 20, 1, {1, 1, 300}, {1, 1, 5}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}},
      {2, 1, 32, 32, 32, {1, 40, 40}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}},
      {2, 1, 24, 36, 3, {1, 20, 20}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}},
      // A weight gradient (9 MiB) too large for a copy per block of images: cut over channels.
      {2, 2, 512, 512, 1, {1, 2, 2}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}},
      // Three image channels, padded to 16 in oneDNN's blocked layout: im2col's input gradient.
      {2, 4, 3, 32, 1, {1, 20, 20}, {1, 5, 5}, {1, 2, 2}, {0, 2, 2}, {1, 1, 1}},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    check_geometry(cases[i], {DType::F32, DType::F64}, {false, true},
                   "geometry " + std::to_string(i));
  }
}

TEST(CpuConv, ThreadCountsGiveTheSameResults) {
  // One thread (one task), two (image blocks, channel blocks for one image) and three (more
  // threads than images).
  const Geometry images{2, 4, 32, 32, 1, {1, 10, 10}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}};
  Geometry one_image = images;
  one_image.batch = 1;
  const int saved = num_threads();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    check_geometry(images, {DType::F32}, {false}, std::to_string(threads) + " threads, 4 images");
    check_geometry(one_image, {DType::F32}, {false}, std::to_string(threads) + " threads, 1 image");
  }
  set_num_threads(saved);
}

// f32 (oneDNN where kiln has it) against f64 (the im2col path) on the same values.
void expect_f32_matches_f64(const std::function<Primitive(DType)>& op, const std::string& what) {
  const std::vector<double> want = detail::into_data(op(DType::F64)).to_f64_vec();
  expect_near_all(op(DType::F32), want, 1e-4, what);
}

#if KILN_HAVE_DNNL
// 3x3 stride-1 convolutions over at most 128 summed channels take oneDNN's Winograd algorithm
// where it has one for this CPU (conv_dnnl.h): its forward, gradients and transposes against
// float64, across task cuts (blocks of images; one image's blocks of channels) and sizes that
// fill no whole 6x6 tile or 16-channel block, with the algorithm on and off.
TEST(CpuConv, WinogradWhereOneDnnHasIt) {
  const auto window = [](const Geometry& g) {
    cpu::Window w;
    for (std::size_t d = 0; d < 3; ++d) {
      w.in[d] = g.in[d];
      w.out[d] = g.out(d);
      w.kernel[d] = g.kernel[d];
      w.stride[d] = g.stride[d];
      w.padding[d] = g.padding[d];
      w.dilation[d] = g.dilation[d];
    }
    return w;
  };
  const auto sizes = [](const Geometry& g) {
    const std::int64_t in = g.in_channels / g.groups;
    return cpu::ConvSizes{g.batch,
                          g.groups,
                          in,
                          g.out_channels / g.groups,
                          in * g.kernel[0] * g.kernel[1] * g.kernel[2],
                          static_cast<std::int64_t>(g.dims)};
  };
  // {dims, batch, in, out, groups, in extent, kernel, stride, padding, dilation}
  const std::vector<Geometry> winograd{
      {2, 4, 32, 48, 1, {1, 13, 11}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}},
      {2, 1, 40, 24, 1, {1, 17, 9}, {1, 3, 3}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}},
      {2, 2, 128, 128, 1, {1, 6, 7}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}},  // the most
  };
  const std::vector<Geometry> direct{
      {2, 2, 16, 16, 1, {1, 12, 12}, {1, 3, 3}, {1, 2, 2}, {0, 1, 1}, {1, 1, 1}},  // stride 2
      {2, 2, 16, 16, 1, {1, 12, 12}, {1, 5, 5}, {1, 1, 1}, {0, 2, 2}, {1, 1, 1}},  // 5x5
      {2, 2, 16, 16, 2, {1, 12, 12}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}},  // groups
      {2, 2, 16, 16, 1, {1, 12, 12}, {1, 3, 3}, {1, 1, 1}, {0, 2, 2}, {1, 2, 2}},  // dilated
      {1, 2, 16, 16, 1, {1, 1, 30}, {1, 1, 3}, {1, 1, 1}, {0, 0, 1}, {1, 1, 1}},   // 1-D
      {2, 2, 144, 16, 1, {1, 6, 6}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}},   // 144 summed
  };
  const bool saved = cpu::conv_winograd();
  cpu::set_conv_winograd(true);
  if (!cpu::dnnl_conv_runs_winograd(cpu::ConvPass::kForward, sizes(winograd[0]),
                                    window(winograd[0]))) {
    cpu::set_conv_winograd(saved);
    GTEST_SKIP() << "oneDNN has no Winograd convolution for this CPU";
  }
  for (bool on : {true, false}) {
    cpu::set_conv_winograd(on);
    for (std::size_t i = 0; i < winograd.size(); ++i) {
      const std::string what =
          "winograd " + std::string(on ? "on" : "off") + ", case " + std::to_string(i);
      for (cpu::ConvPass pass :
           {cpu::ConvPass::kForward, cpu::ConvPass::kInputGrad, cpu::ConvPass::kWeightGrad}) {
        EXPECT_EQ(cpu::dnnl_conv_runs_winograd(pass, sizes(winograd[i]), window(winograd[i])), on)
            << what << ", pass " << static_cast<int>(pass);
      }
      check_geometry(winograd[i], {DType::F32}, {false, true}, what);
    }
  }
  cpu::set_conv_winograd(true);
  for (std::size_t i = 0; i < direct.size(); ++i) {
    EXPECT_FALSE(
        cpu::dnnl_conv_runs_winograd(cpu::ConvPass::kForward, sizes(direct[i]), window(direct[i])))
        << "direct case " << i;
  }
  // 144 channels out: the input gradient sums them directly, the weight gradient may not.
  Geometry wide_out = direct.back();
  std::swap(wide_out.in_channels, wide_out.out_channels);
  EXPECT_FALSE(
      cpu::dnnl_conv_runs_winograd(cpu::ConvPass::kInputGrad, sizes(wide_out), window(wide_out)));
  EXPECT_TRUE(
      cpu::dnnl_conv_runs_winograd(cpu::ConvPass::kWeightGrad, sizes(wide_out), window(wide_out)));
  check_geometry(wide_out, {DType::F32}, {false}, "144 channels out");
  cpu::set_conv_winograd(saved);
}
#endif

TEST(CpuConv, TransposeWithPaddingOutBeyondStride) {
  // padding_out 1 with stride 1 (allowed by dilation 2): the output has one position more than
  // a convolution of that extent would give back, so oneDNN's padding after is the padding less
  // one. oneDNN refuses the negative one of padding 0 and the im2col path takes it.
  for (std::int64_t padding : {0, 1, 2}) {
    const ConvTransposeOptions options{{1, 2}, {padding, 1}, {1, 1}, {2, 2}, 1};
    expect_f32_matches_f64(
        [&](DType dtype) {
          const Primitive x = tensor(random_vector(3 * 8 * 9 * 7, 21), Shape{3, 8, 9, 7}, dtype);
          const Primitive w = tensor(random_vector(8 * 4 * 9, 22), Shape{8, 4, 3, 3}, dtype);
          return detail::conv_transpose(x, w, std::nullopt, options, 2);
        },
        "transpose with padding " + std::to_string(padding));
  }
}

TEST(CpuConv, MoreShapesThanTheCacheHolds) {
  // 150 distinct problems (the cache keeps 128), then the first again.
  for (std::int64_t width : {5, 6, 7}) {
    for (std::int64_t i = 0; i < 50; ++i) {
      const std::int64_t w = width + i;
      expect_f32_matches_f64(
          [&](DType dtype) {
            const Primitive x = tensor(random_vector(static_cast<std::size_t>(2 * 3 * 4 * w), 31),
                                       Shape{2, 3, 4, w}, dtype);
            const Primitive k = tensor(random_vector(4 * 3 * 6, 32), Shape{4, 3, 2, 3}, dtype);
            return detail::conv(x, k, std::nullopt, ConvOptions{{1, 1}, {1, 1}, {1, 1}, 1}, 2);
          },
          "width " + std::to_string(w));
    }
  }
}

TEST(CpuConv, ConcurrentCallsShareTheCache) {
  // Threads of the caller's own, each running convolutions of two shapes (one shared by all):
  // the plans are made, found and run concurrently.
  std::vector<std::thread> threads;
  for (std::int64_t t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (std::int64_t width : {std::int64_t{9}, 10 + t}) {
        expect_f32_matches_f64(
            [&](DType dtype) {
              const Primitive x = tensor(random_vector(static_cast<std::size_t>(4 * 16 * 8 * width),
                                                       static_cast<std::uint64_t>(40 + t)),
                                         Shape{4, 16, 8, width}, dtype);
              const Primitive k =
                  tensor(random_vector(32 * 16 * 9, 41), Shape{32, 16, 3, 3}, dtype);
              return detail::conv(x, k, std::nullopt, ConvOptions{{1, 1}, {1, 1}, {1, 1}, 1}, 2);
            },
            "thread " + std::to_string(t) + " width " + std::to_string(width));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

TEST(CpuConv, EmptyBatchGivesEmptyResults) {
  const Geometry c{2, 0, 4, 8, 1, {1, 5, 5}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}};
  check_geometry(c, {DType::F32, DType::F64}, {false}, "empty batch");
}

}  // namespace
