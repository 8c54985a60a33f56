// Resizing of [N, C, H, W] images (nearest, bilinear, bicubic) and its gradient. Every mode is
// separable: each output row and column reads a few input rows/columns with fixed weights
// (PyTorch's coordinate rules), computed once per axis; planes resample along rows first, then
// mix rows. The gradient runs the same taps backwards.
#include <array>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/spatial.h"
#include "core/buffer.h"

namespace kiln {

using namespace cpu;

namespace {

// The input positions one output position reads along an axis, with their weights.
struct Taps {
  std::array<std::int64_t, 4> index{};
  std::array<double, 4> weight{};
  int count = 0;
};

// PyTorch's bicubic convolution kernel with A = -0.75: for |x| <= 1 and 1 < |x| < 2.
constexpr double kCubicA = -0.75;
double cubic_near(double x) { return ((kCubicA + 2) * x - (kCubicA + 3)) * x * x + 1; }
double cubic_far(double x) {
  return ((kCubicA * x - 5 * kCubicA) * x + 8 * kCubicA) * x - 4 * kCubicA;
}

int tap_count(InterpolateMode mode) {
  return mode == InterpolateMode::Nearest ? 1 : (mode == InterpolateMode::Bilinear ? 2 : 4);
}

std::vector<Taps> axis_taps(std::int64_t in, std::int64_t out, const InterpolateOptions& o) {
  std::vector<Taps> taps(static_cast<std::size_t>(out));
  const double scale =
      o.align_corners ? (out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0)
                      : static_cast<double>(in) / static_cast<double>(out);
  // The source coordinate of output i (half-pixel centres unless align_corners).
  const auto source = [&](std::int64_t i) {
    return o.align_corners ? scale * static_cast<double>(i)
                           : scale * (static_cast<double>(i) + 0.5) - 0.5;
  };
  const auto clamp = [&](std::int64_t i) { return std::clamp<std::int64_t>(i, 0, in - 1); };
  for (std::int64_t i = 0; i < out; ++i) {
    Taps& t = taps[static_cast<std::size_t>(i)];
    switch (o.mode) {
      case InterpolateMode::Nearest:
        // floor(i * in / out) in exact integer arithmetic.
        t.count = 1;
        t.index[0] = std::min((i * in) / out, in - 1);
        t.weight[0] = 1.0;
        break;
      case InterpolateMode::Bilinear: {
        const double src = std::max(source(i), 0.0);
        const std::int64_t i0 = clamp(static_cast<std::int64_t>(src));
        const double lambda = std::clamp(src - static_cast<double>(i0), 0.0, 1.0);
        t.count = 2;
        t.index = {i0, i0 < in - 1 ? i0 + 1 : i0, 0, 0};
        t.weight = {1.0 - lambda, lambda, 0, 0};
        break;
      }
      case InterpolateMode::Bicubic: {
        const double src = source(i);
        const double base = std::floor(src);
        const double f = src - base;
        const auto i0 = static_cast<std::int64_t>(base);
        t.count = 4;
        t.index = {clamp(i0 - 1), clamp(i0), clamp(i0 + 1), clamp(i0 + 2)};
        t.weight = {cubic_far(f + 1), cubic_near(f), cubic_near(1 - f), cubic_far(2 - f)};
        break;
      }
    }
  }
  return taps;
}

// The column taps of every output column, split by tap (index[b][ow], weight[b][ow]) in the
// compute type, so the inner loops over a row read them sequentially.
template <class T>
struct ColumnTaps {
  std::array<detail::Buffer<std::int64_t>, 4> index;
  std::array<detail::Buffer<T>, 4> weight;
  explicit ColumnTaps(const std::vector<Taps>& taps) {
    for (std::size_t b = 0; b < 4; ++b) {
      index[b].resize(taps.size());
      weight[b].resize(taps.size());
      for (std::size_t i = 0; i < taps.size(); ++i) {
        index[b][i] = taps[i].index[b];
        weight[b][i] = static_cast<T>(taps[i].weight[b]);
      }
    }
  }
};

// One plane, separably: every input row some output row reads is first resampled along the
// row into `resampled` ([in_h, out_w], gathers), then each output row mixes kTaps of those rows
// (contiguous, vectorisable).
template <int kTaps, class T>
void interpolate_plane(const T* plane, std::int64_t in_w, const std::vector<Taps>& rows,
                       const ColumnTaps<T>& cols, const detail::Buffer<char>& row_needed,
                       T* resampled, T* result, std::int64_t out_w) {
  for (std::size_t ih = 0; ih < row_needed.size(); ++ih) {
    if (!row_needed[ih]) continue;
    const T* row = plane + static_cast<std::int64_t>(ih) * in_w;
    T* out = resampled + static_cast<std::int64_t>(ih) * out_w;
    for (std::int64_t ow = 0; ow < out_w; ++ow) {
      T along = 0;
      for (int b = 0; b < kTaps; ++b) along += cols.weight[b][ow] * row[cols.index[b][ow]];
      out[ow] = along;
    }
  }
  for (const Taps& r : rows) {
    std::array<const T*, kTaps> source;
    std::array<T, kTaps> weight;
    for (int a = 0; a < kTaps; ++a) {
      source[a] = resampled + r.index[a] * out_w;
      weight[a] = static_cast<T>(r.weight[a]);
    }
    for (std::int64_t ow = 0; ow < out_w; ++ow) {
      T total = 0;
      for (int a = 0; a < kTaps; ++a) total += weight[a] * source[a][ow];
      result[ow] = total;
    }
    result += out_w;
  }
}

// The adjoint of interpolate_plane: output rows scatter into the resampled rows, which
// scatter back along the row into the plane.
template <int kTaps, class T>
void interpolate_plane_grad(const T* grad, std::int64_t in_w, const std::vector<Taps>& rows,
                            const ColumnTaps<T>& cols, const detail::Buffer<char>& row_needed,
                            T* resampled, T* plane, std::int64_t out_w) {
  const auto in_h = static_cast<std::int64_t>(row_needed.size());
  std::fill_n(resampled, in_h * out_w, T(0));
  for (const Taps& r : rows) {
    for (int a = 0; a < kTaps; ++a) {
      T* target = resampled + r.index[a] * out_w;
      const auto weight = static_cast<T>(r.weight[a]);
      for (std::int64_t ow = 0; ow < out_w; ++ow) target[ow] += weight * grad[ow];
    }
    grad += out_w;
  }
  std::fill_n(plane, in_h * in_w, T(0));
  for (std::int64_t ih = 0; ih < in_h; ++ih) {
    if (!row_needed[static_cast<std::size_t>(ih)]) continue;
    const T* source = resampled + ih * out_w;
    T* row = plane + ih * in_w;
    for (std::int64_t ow = 0; ow < out_w; ++ow) {
      for (int b = 0; b < kTaps; ++b) row[cols.index[b][ow]] += cols.weight[b][ow] * source[ow];
    }
  }
}

// Which input rows the output rows read.
detail::Buffer<char> rows_needed(const std::vector<Taps>& rows, std::int64_t in_h) {
  detail::Buffer<char> needed(static_cast<std::size_t>(in_h), 0);
  for (const Taps& r : rows) {
    for (int a = 0; a < r.count; ++a) needed[static_cast<std::size_t>(r.index[a])] = 1;
  }
  return needed;
}

// Calls f(std::integral_constant<int, taps>) for the mode's tap count.
template <class F>
void visit_taps(InterpolateMode mode, F&& f) {
  switch (mode) {
    case InterpolateMode::Nearest:
      f(std::integral_constant<int, 1>{});
      break;
    case InterpolateMode::Bilinear:
      f(std::integral_constant<int, 2>{});
      break;
    case InterpolateMode::Bicubic:
      f(std::integral_constant<int, 4>{});
      break;
  }
}

}  // namespace

Primitive CpuBackend::interpolate(Primitive x, Axes output_size, InterpolateOptions options) {
  const DType dtype = x->dtype();
  const Shape shape = x->shape();
  const std::int64_t in_h = shape[2], in_w = shape[3];
  const std::int64_t out_h = output_size[0], out_w = output_size[1];
  auto in = compute_input(*this, x);
  auto out = make_tensor(in->dtype(), Shape{shape[0], shape[1], out_h, out_w});
  // The tap tables are sized by the output's extent: built only once the output exists, and not
  // at all for an empty batch (whose output size may be anything up to the tensor limit).
  if (out->shape().num_elements() == 0) return from_compute(*this, out, dtype);
  const auto rows = axis_taps(in_h, out_h, options);
  const auto cols = axis_taps(in_w, out_w, options);
  visit_compute(dtype, [&]<class T>(type_tag<T>) {
    const T* src = in->data_as<T>();
    T* dst = out->data_as<T>();
    const ColumnTaps<T> columns(cols);
    const detail::Buffer<char> needed = rows_needed(rows, in_h);
    const std::int64_t work = (out_h + in_h) * out_w * tap_count(options.mode);
    const std::int64_t grain =
        std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(1, work));
    parallel_for(shape[0] * shape[1], grain, [&](std::int64_t begin, std::int64_t end) {
      detail::Buffer<T> resampled(static_cast<std::size_t>(in_h * out_w));
      visit_taps(options.mode, [&]<int kTaps>(std::integral_constant<int, kTaps>) {
        for (std::int64_t p = begin; p < end; ++p) {
          interpolate_plane<kTaps>(src + p * in_h * in_w, in_w, rows, columns, needed,
                                   resampled.data(), dst + p * out_h * out_w, out_w);
        }
      });
    });
  });
  return from_compute(*this, out, dtype);
}

Primitive CpuBackend::interpolate_backward(Primitive x, Primitive output_grad, Axes output_size,
                                           InterpolateOptions options) {
  const DType dtype = x->dtype();
  const Shape shape = x->shape();
  const std::int64_t in_h = shape[2], in_w = shape[3];
  const std::int64_t out_h = output_size[0], out_w = output_size[1];
  auto dy = compute_input(*this, output_grad);
  auto out = make_tensor(dy->dtype(), shape);
  if (out->shape().num_elements() == 0) return from_compute(*this, out, dtype);
  const auto rows = axis_taps(in_h, out_h, options);
  const auto cols = axis_taps(in_w, out_w, options);
  visit_compute(dtype, [&]<class T>(type_tag<T>) {
    const T* src = dy->data_as<T>();
    T* dst = out->data_as<T>();
    const ColumnTaps<T> columns(cols);
    const detail::Buffer<char> needed = rows_needed(rows, in_h);
    const std::int64_t work = (out_h + in_h) * out_w * tap_count(options.mode) + in_h * in_w;
    const std::int64_t grain =
        std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(1, work));
    // Planes are independent, so each scatters into its own gradient plane without races.
    parallel_for(shape[0] * shape[1], grain, [&](std::int64_t begin, std::int64_t end) {
      detail::Buffer<T> resampled(static_cast<std::size_t>(in_h * out_w));
      visit_taps(options.mode, [&]<int kTaps>(std::integral_constant<int, kTaps>) {
        for (std::int64_t p = begin; p < end; ++p) {
          interpolate_plane_grad<kTaps>(src + p * out_h * out_w, in_w, rows, columns, needed,
                                        resampled.data(), dst + p * in_h * in_w, out_w);
        }
      });
    });
  });
  return from_compute(*this, out, dtype);
}

}  // namespace kiln
