// im2col / col2im (the column matrices behind convolution) and the ops that expose them:
// unfold_patches and fold_patches.
#include <cstring>

#include "backend/spatial_shape.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/spatial.h"

namespace kiln {

using namespace cpu;

namespace cpu {

namespace {

// The kernel tap (kd, kh, kw) of row k of a column matrix.
Dims3 tap_of(std::int64_t k, const Window& w) {
  return {k / (w.kernel[1] * w.kernel[2]), (k / w.kernel[2]) % w.kernel[1], k % w.kernel[2]};
}

// Calls visit(column_offset, image_offset, count, image_stride) for every run of window
// positions of one kernel tap that falls inside the image, and pad(column_offset, count) for
// every run that falls in the padding. Column offsets walk the out grid row-major.
template <class Visit, class Pad>
void walk_tap(const Window& w, const Dims3& tap, Visit&& visit, Pad&& pad) {
  std::array<std::pair<std::int64_t, std::int64_t>, 3> valid;
  for (std::size_t d = 0; d < 3; ++d) {
    valid[d] = valid_positions(w.in[d], w.out[d], w.stride[d], w.padding[d], tap[d] * w.dilation[d]);
  }
  const auto position = [&](std::size_t d, std::int64_t o) {
    return o * w.stride[d] - w.padding[d] + tap[d] * w.dilation[d];
  };
  const auto [w0, w1] = valid[2];
  for (std::int64_t od = 0; od < w.out[0]; ++od) {
    const std::int64_t plane = od * w.out[1] * w.out[2];
    if (od < valid[0].first || od >= valid[0].second) {
      pad(plane, w.out[1] * w.out[2]);
      continue;
    }
    const std::int64_t id = position(0, od);
    for (std::int64_t oh = 0; oh < w.out[1]; ++oh) {
      const std::int64_t row = plane + oh * w.out[2];
      if (oh < valid[1].first || oh >= valid[1].second || w0 >= w1) {
        pad(row, w.out[2]);
        continue;
      }
      const std::int64_t ih = position(1, oh);
      if (w0 > 0) pad(row, w0);
      visit(row + w0, (id * w.in[1] + ih) * w.in[2] + position(2, w0), w1 - w0, w.stride[2]);
      if (w1 < w.out[2]) pad(row + w1, w.out[2] - w1);
    }
  }
}

}  // namespace

template <class T>
void im2col(const T* image, std::int64_t channels, const Window& w, T* columns) {
  const std::int64_t taps = w.kernel_size();
  const std::int64_t columns_per_row = w.out_size();
  const std::int64_t image_size = w.in_size();
  const std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(1, columns_per_row));
  parallel_for(channels * taps, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const T* src = image + (r / taps) * image_size;
      T* dst = columns + r * columns_per_row;
      walk_tap(
          w, tap_of(r % taps, w),
          [&](std::int64_t col, std::int64_t pos, std::int64_t count, std::int64_t stride) {
            if (stride == 1) {
              std::memcpy(dst + col, src + pos, static_cast<std::size_t>(count) * sizeof(T));
            } else {
              for (std::int64_t i = 0; i < count; ++i) dst[col + i] = src[pos + i * stride];
            }
          },
          [&](std::int64_t col, std::int64_t count) { std::fill_n(dst + col, count, T(0)); });
    }
  });
}

template <class T>
void col2im(const T* columns, std::int64_t channels, const Window& w, T* image) {
  const std::int64_t taps = w.kernel_size();
  const std::int64_t columns_per_row = w.out_size();
  const std::int64_t image_size = w.in_size();
  // Channels write disjoint image planes, so they run in parallel without races.
  const std::int64_t work = std::max<std::int64_t>(1, taps * columns_per_row + image_size);
  const std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / work);
  parallel_for(channels, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      T* dst = image + c * image_size;
      std::fill_n(dst, image_size, T(0));
      for (std::int64_t k = 0; k < taps; ++k) {
        const T* src = columns + (c * taps + k) * columns_per_row;
        walk_tap(
            w, tap_of(k, w),
            [&](std::int64_t col, std::int64_t pos, std::int64_t count, std::int64_t stride) {
              for (std::int64_t i = 0; i < count; ++i) dst[pos + i * stride] += src[col + i];
            },
            [](std::int64_t, std::int64_t) {});
      }
    }
  });
}

template void im2col<float>(const float*, std::int64_t, const Window&, float*);
template void im2col<double>(const double*, std::int64_t, const Window&, double*);
template void col2im<float>(const float*, std::int64_t, const Window&, float*);
template void col2im<double>(const double*, std::int64_t, const Window&, double*);

std::shared_ptr<CpuTensor> compute_input(CpuBackend& backend, const Primitive& x) {
  return contiguous(backend.cast(x, compute_dtype(x->dtype())));
}

Primitive from_compute(CpuBackend& backend, Primitive result, DType dtype) {
  return backend.cast(std::move(result), dtype);
}

}  // namespace cpu

namespace {

// The window of a 2-d unfold: image [.., H, W], options filled in by the tensor layer.
Window unfold_window(std::int64_t height, std::int64_t width, const UnfoldOptions& o) {
  Window w;
  w.in = align3(std::array{height, width}, 1);
  w.kernel = align3(o.kernel_size, 1);
  w.stride = align3(o.stride, 1);
  w.padding = align3(o.padding, 0);
  w.dilation = align3(o.dilation, 1);
  for (std::size_t d = 1; d < 3; ++d) {
    w.out[d] = spatial::conv_output_size(w.in[d], w.kernel[d], w.stride[d], w.padding[d],
                                         w.dilation[d]);
  }
  return w;
}

}  // namespace

Primitive CpuBackend::unfold_patches(Primitive x, UnfoldOptions options) {
  const DType dtype = x->dtype();
  const Shape& shape = x->shape();
  const Window w = unfold_window(shape[2], shape[3], options);
  const Shape out_shape{shape[0], shape[1] * w.kernel_size(), w.out_size()};
  auto in = compute_input(*this, x);
  auto out = make_tensor(in->dtype(), out_shape);
  // The batch folds into the channels: image [N * C, H, W] -> columns [N * C * taps, L].
  visit_compute(dtype, [&]<class T>(type_tag<T>) {
    im2col(in->data_as<T>(), shape[0] * shape[1], w, out->data_as<T>());
  });
  return from_compute(*this, out, dtype);
}

Primitive CpuBackend::fold_patches(Primitive x, Axes output_size, UnfoldOptions options) {
  const DType dtype = x->dtype();
  const Shape& shape = x->shape();
  const Window w = unfold_window(output_size[0], output_size[1], options);
  const std::int64_t channels = shape[1] / w.kernel_size();
  const Shape out_shape{shape[0], channels, output_size[0], output_size[1]};
  auto in = compute_input(*this, x);
  auto out = make_tensor(in->dtype(), out_shape);
  visit_compute(dtype, [&]<class T>(type_tag<T>) {
    col2im(in->data_as<T>(), shape[0] * channels, w, out->data_as<T>());
  });
  return from_compute(*this, out, dtype);
}

}  // namespace kiln
