// The CPU convolution kernels on shapes large enough to split into parallel tasks (the
// conformance rows are small and mostly run on one thread), against direct float64 loops.
#include <cblas.h>
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <random>

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

}  // namespace
