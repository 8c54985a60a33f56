// im2col / col2im (the column matrices behind convolution) and the ops that expose them:
// unfold_patches and fold_patches.
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/spatial.h"
#include "contract/spatial_shape.h"

namespace kiln {

using namespace cpu;

namespace cpu {

namespace {

// The kernel tap (kd, kh, kw) of row k of a column matrix.
Dims3 tap_of(std::int64_t k, const Window& w) {
  return {k / (w.kernel[1] * w.kernel[2]), (k / w.kernel[2]) % w.kernel[1], k % w.kernel[2]};
}

// Calls visit(column, image_offset, count, image_stride) for every run of the window positions
// [first, last) (row-major over the out grid) where one kernel tap falls inside the image, and
// pad(column, count) for every run where it falls in the padding; column counts from first.
template <class Visit, class Pad>
void walk_tap(const Window& w, const Dims3& tap, std::int64_t first, std::int64_t last,
              Visit&& visit, Pad&& pad) {
  std::array<std::pair<std::int64_t, std::int64_t>, 3> valid;
  for (std::size_t d = 0; d < 3; ++d) {
    valid[d] =
        valid_positions(w.in[d], w.out[d], w.stride[d], w.padding[d], tap[d] * w.dilation[d]);
  }
  const auto position = [&](std::size_t d, std::int64_t o) {
    return o * w.stride[d] - w.padding[d] + tap[d] * w.dilation[d];
  };
  const std::int64_t row_length = w.out[2];
  // One run of positions per out-grid row that [first, last) touches.
  for (std::int64_t l = first; l < last;) {
    const std::int64_t row = l / row_length;
    const std::int64_t od = row / w.out[1], oh = row % w.out[1];
    const std::int64_t begin = l % row_length;
    const std::int64_t end = std::min(row_length, begin + (last - l));
    const std::int64_t column = l - first - begin;  // column of ow = 0 in this row
    l += end - begin;
    if (od < valid[0].first || od >= valid[0].second || oh < valid[1].first ||
        oh >= valid[1].second) {
      pad(column + begin, end - begin);
      continue;
    }
    const std::int64_t inside_begin = std::clamp(valid[2].first, begin, end);
    const std::int64_t inside_end = std::clamp(valid[2].second, inside_begin, end);
    if (inside_begin > begin) pad(column + begin, inside_begin - begin);
    if (inside_end > inside_begin) {
      const std::int64_t offset =
          (position(0, od) * w.in[1] + position(1, oh)) * w.in[2] + position(2, inside_begin);
      visit(column + inside_begin, offset, inside_end - inside_begin, w.stride[2]);
    }
    if (end > inside_end) pad(column + inside_end, end - inside_end);
  }
}

// Row `tap` of one channel's column matrix over the window positions [first, last).
template <class T>
void im2col_row(const T* channel, const Window& w, std::int64_t tap, std::int64_t first,
                std::int64_t last, T* row) {
  walk_tap(
      w, tap_of(tap, w), first, last,
      [&](std::int64_t col, std::int64_t pos, std::int64_t count, std::int64_t stride) {
        if (stride == 1) {
          std::memcpy(row + col, channel + pos, static_cast<std::size_t>(count) * sizeof(T));
        } else {
          for (std::int64_t i = 0; i < count; ++i) row[col + i] = channel[pos + i * stride];
        }
      },
      [&](std::int64_t col, std::int64_t count) { std::fill_n(row + col, count, T(0)); });
}

}  // namespace

template <class T>
void im2col_block(const T* image, std::int64_t channels, const Window& w, std::int64_t first,
                  std::int64_t last, T* columns) {
  const std::int64_t taps = w.kernel_size();
  for (std::int64_t r = 0; r < channels * taps; ++r) {
    im2col_row(image + (r / taps) * w.in_size(), w, r % taps, first, last,
               columns + r * (last - first));
  }
}

template <class T>
void col2im_block(const T* columns, std::int64_t channels, const Window& w, T* image) {
  const std::int64_t taps = w.kernel_size();
  const std::int64_t width = w.out_size();
  for (std::int64_t c = 0; c < channels; ++c) {
    T* dst = image + c * w.in_size();
    std::fill_n(dst, w.in_size(), T(0));
    for (std::int64_t k = 0; k < taps; ++k) {
      const T* src = columns + (c * taps + k) * width;
      walk_tap(
          w, tap_of(k, w), 0, width,
          [&](std::int64_t col, std::int64_t pos, std::int64_t count, std::int64_t stride) {
            for (std::int64_t i = 0; i < count; ++i) dst[pos + i * stride] += src[col + i];
          },
          [](std::int64_t, std::int64_t) {});
    }
  }
}

template <class T>
void im2col(const T* image, std::int64_t channels, const Window& w, T* columns) {
  const std::int64_t taps = w.kernel_size();
  const std::int64_t width = w.out_size();
  // Rows are independent, so they are split across threads.
  const std::int64_t grain =
      std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(1, width));
  parallel_for(channels * taps, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      im2col_row(image + (r / taps) * w.in_size(), w, r % taps, 0, width, columns + r * width);
    }
  });
}

template <class T>
void col2im(const T* columns, std::int64_t channels, const Window& w, T* image) {
  const std::int64_t taps = w.kernel_size();
  const std::int64_t work = std::max<std::int64_t>(1, taps * w.out_size() + w.in_size());
  // Channels write disjoint image planes, so they run in parallel without races.
  parallel_for(channels, std::max<std::int64_t>(1, kParallelGrain / work),
               [&](std::int64_t begin, std::int64_t end) {
                 col2im_block(columns + begin * taps * w.out_size(), end - begin, w,
                              image + begin * w.in_size());
               });
}

template void im2col_block<float>(const float*, std::int64_t, const Window&, std::int64_t,
                                  std::int64_t, float*);
template void im2col_block<double>(const double*, std::int64_t, const Window&, std::int64_t,
                                   std::int64_t, double*);
template void col2im_block<float>(const float*, std::int64_t, const Window&, float*);
template void col2im_block<double>(const double*, std::int64_t, const Window&, double*);
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
    w.out[d] =
        spatial::conv_output_size(w.in[d], w.kernel[d], w.stride[d], w.padding[d], w.dilation[d]);
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
