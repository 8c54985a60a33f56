// im2col / col2im (the column matrices behind convolution) and the ops that expose them:
// unfold_patches and fold_patches.
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/spatial.h"
#include "contract/spatial_shape.h"

namespace kiln {

using namespace cpu;

namespace cpu {

namespace {

// What walking one kernel tap needs, worked out once per tap of a call rather than once per row
// of a column matrix (the divisions it takes cost more than a small image's row of copies).
struct TapPlan {
  // Along each dim, the out positions whose tap falls inside the input: [first, second).
  std::array<std::pair<std::int64_t, std::int64_t>, 3> valid;
  Dims3 start;  // the input position of out position 0 along each dim (in the padding if < 0)
};

// The plan of every tap k of w, in row order of a column matrix (kd, kh, kw row-major).
std::vector<TapPlan> plan_taps(const Window& w) {
  std::vector<TapPlan> plans(static_cast<std::size_t>(w.kernel_size()));
  for (std::size_t k = 0; k < plans.size(); ++k) {
    const auto at = static_cast<std::int64_t>(k);
    const Dims3 tap{at / (w.kernel[1] * w.kernel[2]), (at / w.kernel[2]) % w.kernel[1],
                    at % w.kernel[2]};
    for (std::size_t d = 0; d < 3; ++d) {
      const std::int64_t offset = tap[d] * w.dilation[d];
      // At unit stride the range needs no division (a call plans every tap, per image).
      plans[k].valid[d] =
          w.stride[d] == 1
              ? std::pair{std::clamp<std::int64_t>(w.padding[d] - offset, 0, w.out[d]),
                          std::clamp<std::int64_t>(w.in[d] + w.padding[d] - offset, 0, w.out[d])}
              : valid_positions(w.in[d], w.out[d], w.stride[d], w.padding[d], offset);
      plans[k].valid[d].second = std::max(plans[k].valid[d].first, plans[k].valid[d].second);
      plans[k].start[d] = offset - w.padding[d];
    }
  }
  return plans;
}

// The window positions [first, last) of a call (row-major over the out grid), with the out-grid
// coordinates of first worked out once per call, not per row of a column matrix.
struct PositionRange {
  std::int64_t first = 0, last = 0;
  std::int64_t begin = 0;       // first's column in its out row
  std::int64_t od = 0, oh = 0;  // first's out row
  bool whole_rows = false;      // first and last on out-row boundaries
};

PositionRange position_range(const Window& w, std::int64_t first, std::int64_t last) {
  PositionRange range{first, last};
  if (first >= last) return range;  // no positions (an out grid with a 0 in it): nothing to walk
  const std::int64_t row_length = w.out[2];
  const std::int64_t row = first / row_length;
  range.begin = first - row * row_length;
  range.od = row / w.out[1];
  range.oh = row % w.out[1];
  range.whole_rows = range.begin == 0 && last % row_length == 0;
  return range;
}

// Calls visit(column, image_offset, count, image_stride) for every run of the window positions
// of range where one kernel tap falls inside the image, and pad(column, count) for every run
// where it falls in the padding; column counts from range.first.
template <class Visit, class Pad>
void walk_tap(const Window& w, const TapPlan& tap, const PositionRange& range, Visit&& visit,
              Pad&& pad) {
  const auto& valid = tap.valid;
  const auto position = [&](std::size_t d, std::int64_t o) {
    return o * w.stride[d] + tap.start[d];
  };
  const std::int64_t row_length = w.out[2];
  const std::int64_t first = range.first, last = range.last;
  // One run of positions per out-grid row that the range touches; the row's coordinates are
  // stepped, not divided out per run.
  std::int64_t begin = range.begin, od = range.od, oh = range.oh;
  for (std::int64_t l = first; l < last;) {
    const std::int64_t end = std::min(row_length, begin + (last - l));
    const std::int64_t column = l - first - begin;  // column of ow = 0 in this row
    l += end - begin;
    if (od < valid[0].first || od >= valid[0].second || oh < valid[1].first ||
        oh >= valid[1].second) {
      pad(column + begin, end - begin);
    } else {
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
    begin = 0;
    if (++oh == w.out[1]) {
      oh = 0;
      ++od;
    }
  }
}

// Short runs (an image row, a pad of one or two) copied or zeroed inline: fixed-size pieces the
// compiler turns into vector moves (a loop over the rest would become a memcpy or memset call,
// which costs more than such a run's work). bytes is a multiple of 4; from null: zeros.
inline void move_short(char* to, const char* from, std::int64_t bytes) {
  static constexpr char kZeros[32] = {};
  const std::int64_t step = from == nullptr ? 0 : 1;
  const char* source = from == nullptr ? kZeros : from;
  for (; bytes >= 32; bytes -= 32, to += 32, source += 32 * step) std::memcpy(to, source, 32);
  if (bytes >= 16) {
    std::memcpy(to, source, 16);
    bytes -= 16, to += 16, source += 16 * step;
  }
  if (bytes >= 8) {
    std::memcpy(to, source, 8);
    bytes -= 8, to += 8, source += 8 * step;
  }
  if (bytes >= 4) std::memcpy(to, source, 4);
}

// Row `tap` of one channel's column matrix over the window positions [first, last).
template <class T>
void im2col_row(const T* channel, const Window& w, const TapPlan& tap, const PositionRange& range,
                T* row) {
  constexpr auto kSize = static_cast<std::int64_t>(sizeof(T));
  const auto zero = [&](std::int64_t column, std::int64_t count) {
    move_short(reinterpret_cast<char*>(row + column), nullptr, count * kSize);
  };
  const std::int64_t width = w.out[2];
  const std::int64_t first = range.first, last = range.last;
  if (range.whole_rows && w.out[0] == 1 && w.stride[1] == 1 && w.stride[2] == 1 &&
      w.in[2] == width) {
    // A window as wide as its input at unit strides (a 3x3 convolution padded by 1) over whole
    // out rows: every out row in range reads its input row at one fixed shift, so those rows
    // are one contiguous copy, from the first in-range column of the first row to the last of
    // the last (so that it reads inside the image); the columns in the padding, which it fills
    // with the neighbouring rows' ends, are zeroed after. Per row: a few stores, no run logic.
    const std::int64_t row0 = first / width, row1 = last / width;
    const std::int64_t h0 = std::clamp(tap.valid[1].first, row0, row1);
    const std::int64_t h1 = std::clamp(tap.valid[1].second, h0, row1);
    const auto [c0, c1] = tap.valid[2];
    if (h1 == h0 || c1 == c0) {
      zero(0, last - first);
      return;
    }
    zero(0, (h0 - row0) * width);
    const std::int64_t shift = tap.start[1] * width + tap.start[2];
    const std::int64_t begin = h0 * width + c0, end = (h1 - 1) * width + c1;
    std::memcpy(row + (begin - first), channel + begin + shift,
                static_cast<std::size_t>((end - begin) * kSize));
    // Column by column down the rows: a column or two, each a short strided loop.
    T* rows = row + (h0 - row0) * width;
    const auto zero_column = [&](std::int64_t column) {
      for (std::int64_t h = 0; h < h1 - h0; ++h) rows[h * width + column] = T(0);
    };
    for (std::int64_t column = 0; column < c0; ++column) zero_column(column);
    for (std::int64_t column = c1; column < width; ++column) zero_column(column);
    zero((h1 - row0) * width, (row1 - h1) * width);
    return;
  }
  walk_tap(
      w, tap, range,
      [&](std::int64_t col, std::int64_t pos, std::int64_t count, std::int64_t stride) {
        if (stride == 1) {
          move_short(reinterpret_cast<char*>(row + col),
                     reinterpret_cast<const char*>(channel + pos), count * kSize);
        } else {
          for (std::int64_t i = 0; i < count; ++i) row[col + i] = channel[pos + i * stride];
        }
      },
      zero);
}

// Rows [begin, end) of the column matrix of image (row r: channel r / taps, tap r % taps).
template <class T>
void im2col_rows(const T* image, const Window& w, const std::vector<TapPlan>& plans,
                 std::int64_t begin, std::int64_t end, std::int64_t first, std::int64_t last,
                 T* columns) {
  const auto taps = static_cast<std::int64_t>(plans.size());
  const PositionRange range = position_range(w, first, last);
  std::int64_t channel = begin / taps, tap = begin % taps;
  for (std::int64_t r = begin; r < end; ++r) {
    im2col_row(image + channel * w.in_size(), w, plans[static_cast<std::size_t>(tap)], range,
               columns + r * (last - first));
    if (++tap == taps) {
      tap = 0;
      ++channel;
    }
  }
}

}  // namespace

template <class T>
void im2col_block(const T* image, std::int64_t channels, const Window& w, std::int64_t first,
                  std::int64_t last, T* columns) {
  const std::vector<TapPlan> plans = plan_taps(w);
  im2col_rows(image, w, plans, 0, channels * w.kernel_size(), first, last, columns);
}

template <class T>
void col2im_block(const T* columns, std::int64_t channels, const Window& w, T* image) {
  const std::vector<TapPlan> plans = plan_taps(w);
  const std::int64_t width = w.out_size();
  const PositionRange range = position_range(w, 0, width);
  const std::int64_t row_width = w.out[2];
  const bool same_width =
      w.out[0] == 1 && w.stride[1] == 1 && w.stride[2] == 1 && w.in[2] == row_width;
  for (std::int64_t c = 0; c < channels; ++c) {
    T* dst = image + c * w.in_size();
    std::fill_n(dst, w.in_size(), T(0));
    for (std::size_t k = 0; k < plans.size(); ++k) {
      const T* src =
          columns +
          (c * static_cast<std::int64_t>(plans.size()) + static_cast<std::int64_t>(k)) * width;
      if (same_width) {
        // As im2col_row's shifted copy: each in-range out row adds to its input row at one
        // fixed shift, the columns in range only.
        const TapPlan& tap = plans[k];
        const auto [h0, h1] = tap.valid[1];
        const auto [c0, c1] = tap.valid[2];
        const std::int64_t shift = tap.start[1] * row_width + tap.start[2];
        for (std::int64_t h = h0; h < h1; ++h) {
          T* out = dst + h * row_width + c0 + shift;
          const T* in = src + h * row_width + c0;
          for (std::int64_t j = 0; j < c1 - c0; ++j) out[j] += in[j];
        }
        continue;
      }
      walk_tap(
          w, plans[k], range,
          [&](std::int64_t col, std::int64_t pos, std::int64_t count, std::int64_t stride) {
            if (stride == 1) {  // unit stride, as a vector loop
              T* out = dst + pos;
              const T* in = src + col;
              for (std::int64_t i = 0; i < count; ++i) out[i] += in[i];
              return;
            }
            for (std::int64_t i = 0; i < count; ++i) dst[pos + i * stride] += src[col + i];
          },
          [](std::int64_t, std::int64_t) {});
    }
  }
}

template <class T>
void im2col(const T* image, std::int64_t channels, const Window& w, T* columns) {
  const std::vector<TapPlan> plans = plan_taps(w);
  const std::int64_t width = w.out_size();
  // Rows are independent, so they are split across threads.
  const std::int64_t grain =
      std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(1, width));
  parallel_for(channels * w.kernel_size(), grain, [&](std::int64_t begin, std::int64_t end) {
    im2col_rows(image, w, plans, begin, end, 0, width, columns);
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
