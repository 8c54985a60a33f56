// Max, average and adaptive average pooling over 1-3 spatial dims, with their gradients.
// Every (batch, channel) plane is independent, so planes run in parallel and the gradients
// scatter into their own plane without races.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/spatial.h"
#include "contract/spatial_shape.h"
#include "core/buffer.h"

namespace kiln {

using namespace cpu;

namespace {

Shape with_spatial(const Shape& x, const Dims3& spatial) {
  detail::DimVector out{x[0], x[1]};
  for (std::size_t d = 3 - (x.rank() - 2); d < 3; ++d) out.push_back(spatial[d]);
  return Shape(std::move(out));
}

Window pool_window(const Shape& x, const PoolOptions& o) {
  Window w;
  w.in = spatial3(x);
  w.kernel = align3(o.kernel_size, 1);
  w.stride = align3(o.stride, 1);
  w.padding = align3(o.padding, 0);
  w.dilation = align3(o.dilation, 1);
  for (std::size_t d = 0; d < 3; ++d) {
    w.out[d] = spatial::pool_output_size(w.in[d], w.kernel[d], w.stride[d], w.padding[d],
                                         w.dilation[d], o.ceil_mode);
  }
  return w;
}

// Runs body(plane) over the n * c planes, in parallel when the work is large. One parallel
// region for every op and dtype: the body is called through a pointer, once per plane.
void for_each_plane(std::int64_t planes, std::int64_t work_per_plane,
                    const std::function<void(std::int64_t)>& body) {
  const std::int64_t grain =
      std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(1, work_per_plane));
  parallel_for(planes, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t p = begin; p < end; ++p) body(p);
  });
}

// Indices of any integer dtype to and from int64, n at a time: the kernels work on int64 and
// are not made again for every index dtype. (An index dtype is checked by the tensor layer.)
void store_indices(const std::int64_t* from, std::int64_t n, std::byte* to, DType dtype) {
  visit_int_dtype(dtype, "max_pool_with_indices", [&]<class I>(type_tag<I>) {
    I* out = reinterpret_cast<I*>(to);
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<I>(from[i]);
  });
}
void load_indices(const std::byte* from, std::int64_t n, DType dtype, std::int64_t* to) {
  visit_int_dtype(dtype, "max_pool_with_indices_backward", [&]<class I>(type_tag<I>) {
    const I* in = reinterpret_cast<const I*>(from);
    for (std::int64_t i = 0; i < n; ++i) to[i] = static_cast<std::int64_t>(in[i]);
  });
}

// The clipped extent of an average-pooling window along one dim, and its size with padding
// counted (clipped to the padded input, as PyTorch does).
struct Span {
  std::int64_t begin, end, padded;
};
Span avg_span(const Window& w, std::size_t d, std::int64_t o) {
  const std::int64_t start = o * w.stride[d] - w.padding[d];
  const std::int64_t stop = std::min(start + w.kernel[d], w.in[d] + w.padding[d]);
  return {std::max<std::int64_t>(start, 0), std::min(stop, w.in[d]), stop - start};
}

// Calls f(out_row, spans of d and h, scale) for every output row (od, oh) of an average pool,
// where out_row is the row's first output index and scale[ow] = 1 / divisor of each window.
template <class T, class F>
void for_each_avg_row(const Window& w, bool count_include_pad, F&& f) {
  detail::Buffer<Span> along_w(static_cast<std::size_t>(w.out[2]));
  for (std::int64_t ow = 0; ow < w.out[2]; ++ow)
    along_w[static_cast<std::size_t>(ow)] = avg_span(w, 2, ow);
  detail::Buffer<T> scale(along_w.size());
  std::int64_t out_row = 0;
  for (std::int64_t od = 0; od < w.out[0]; ++od) {
    const Span sd = avg_span(w, 0, od);
    for (std::int64_t oh = 0; oh < w.out[1]; ++oh, out_row += w.out[2]) {
      const Span sh = avg_span(w, 1, oh);
      for (std::size_t i = 0; i < along_w.size(); ++i) {
        const Span& sw = along_w[i];
        const std::int64_t divisor =
            count_include_pad ? sd.padded * sh.padded * sw.padded
                              : (sd.end - sd.begin) * (sh.end - sh.begin) * (sw.end - sw.begin);
        scale[i] = T(1) / static_cast<T>(divisor);
      }
      f(out_row, sd, sh, scale);
    }
  }
}

// The kernel taps along dim d that land inside the input for some window position: [first,
// last). The others read only padding, and a window may be far larger than its input (a kernel of
// 2^41 with padding 2^40 on 4 columns is valid): its work and its tables follow these taps, not
// the kernel's size.
struct UsefulTaps {
  std::int64_t first, last;
};
UsefulTaps useful_taps(const Window& w, std::size_t d) {
  using Wide = spatial::Wide;
  // Tap k of position o reads o * stride - padding + k * dilation.
  const Wide last_start =
      Wide{std::max<std::int64_t>(w.out[d] - 1, 0)} * w.stride[d] - w.padding[d];
  const Wide lowest = -last_start;  // taps below this read left of the input at every position
  const Wide highest = Wide{w.in[d]} + w.padding[d];  // taps from here read right of it
  auto ceil_div_wide = [](Wide a, Wide b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); };
  const Wide first = std::clamp<Wide>(ceil_div_wide(lowest, w.dilation[d]), 0, w.kernel[d]);
  const Wide last = std::clamp<Wide>(ceil_div_wide(highest, w.dilation[d]), first, w.kernel[d]);
  return {static_cast<std::int64_t>(first), static_cast<std::int64_t>(last)};
}

// Work per plane for the thread pool's grain: output positions times useful taps (saturating).
std::int64_t plane_work(const Window& w) {
  spatial::Wide work = w.out_size();
  for (std::size_t d = 0; d < 3; ++d) {
    const UsefulTaps t = useful_taps(w, d);
    work = std::min<spatial::Wide>(work * std::max<std::int64_t>(t.last - t.first, 1),
                                   std::numeric_limits<std::int64_t>::max());
  }
  return static_cast<std::int64_t>(work);
}

// The taps of a pooling window along one dim that fall inside the input: window position o
// starts at `start`; taps j in [first, last) read start + j * dilation.
struct TapRange {
  std::int64_t start, first, last;
};
TapRange tap_range(const Window& w, std::size_t d, std::int64_t o, std::int64_t dilation) {
  const std::int64_t start = o * w.stride[d] - w.padding[d];
  const std::int64_t first = std::clamp<std::int64_t>(ceil_div(-start, dilation), 0, w.kernel[d]);
  const std::int64_t last =
      std::clamp<std::int64_t>(ceil_div(w.in[d] - start, dilation), first, w.kernel[d]);
  return {start, first, last};
}

// A kernel tap along w that some window position reads inside the input: kw, and the output
// columns [first, last) whose tap lies inside it.
struct WTap {
  std::int64_t kw, first, last;
};

// The taps along w that read inside the input, in order, with their columns; a tap's offset in
// its window is kw * dilation (1 for average pooling, which has none). Normally every tap of the
// useful range is looked at. A range far longer than the taps inside it (a window far wider than
// the input, as ceil mode with a huge kernel and padding gives: fuzz/corpus/remote_frame/
// pool_taps_past_the_input's range held 3 * 10^11 taps, 4 of them inside) is walked position by
// position instead, so that the table is never larger than the work.
std::vector<WTap> taps_along_w(const Window& w, std::int64_t dilation) {
  const UsefulTaps range = useful_taps(w, 2);
  std::vector<WTap> taps;
  auto add = [&](std::int64_t kw) {
    const auto [first, last] =
        valid_positions(w.in[2], w.out[2], w.stride[2], w.padding[2], kw * dilation);
    if (first < last) taps.push_back({kw, first, last});
  };
  // A position reads at most in / dilation + 1 taps inside the input.
  const spatial::Wide inside = spatial::Wide{w.out[2]} * (w.in[2] / dilation + 1);
  if (spatial::Wide{range.last - range.first} <= inside) {
    for (std::int64_t kw = range.first; kw < range.last; ++kw) add(kw);
    return taps;
  }
  std::vector<std::int64_t> seen;
  for (std::int64_t o = 0; o < w.out[2]; ++o) {
    const TapRange r = tap_range(w, 2, o, dilation);
    for (std::int64_t kw = r.first; kw < r.last; ++kw) seen.push_back(kw);
  }
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  for (const std::int64_t kw : seen) add(kw);
  return taps;
}

std::vector<TapRange> tap_ranges(const Window& w, std::size_t d) {
  std::vector<TapRange> ranges(static_cast<std::size_t>(w.out[d]));
  for (std::int64_t o = 0; o < w.out[d]; ++o) {
    ranges[static_cast<std::size_t>(o)] = tap_range(w, d, o, w.dilation[d]);
  }
  return ranges;
}

// What every plane of a max pool shares, worked out once per call: the taps of each window
// position along each dim, and along w the positions each kernel tap reads inside the input (a
// small plane's windows take less time than these divisions and allocations).
struct PoolTaps {
  std::array<std::vector<TapRange>, 3> ranges;
  std::vector<WTap> w_taps;
  bool two_by_two = false;  // a 2-d 2x2 window at stride 2, unpadded, undilated
};

PoolTaps pool_taps(const Window& w) {
  PoolTaps taps{{tap_ranges(w, 0), tap_ranges(w, 1), tap_ranges(w, 2)}, {}};
  taps.two_by_two = w.out[0] == 1 && w.kernel == Dims3{1, 2, 2} && w.stride[1] == 2 &&
                    w.stride[2] == 2 && w.padding == Dims3{0, 0, 0} &&
                    w.dilation == Dims3{1, 1, 1} && w.in[0] == 1;
  taps.w_taps = taps_along_w(w, w.dilation[2]);
  return taps;
}

// The maximum of every window of one plane (NaN wins, as in PyTorch: `v > best || isnan(v)`,
// taps in row-major order) and its flat index in the plane. Each output row is updated one
// kernel tap at a time across all its positions: branch-free, vectorisable loops.
template <bool kWithIndex, class T>
void max_pool_plane(const T* x, const Window& w, const PoolTaps& pool, T* out,
                    std::int64_t* index) {
  const std::int64_t width = w.out[2];
  if (pool.two_by_two) {
    // The usual 2x2 window at stride 2, every window inside the plane: its four taps in the
    // order of the loops below, without their bookkeeping (a small plane's windows are few).
    const std::int64_t in_width = w.in[2];
    for (std::int64_t oh = 0; oh < w.out[1]; ++oh) {
      const std::int64_t top = 2 * oh * in_width;
      for (std::int64_t ow = 0; ow < width; ++ow) {
        std::int64_t at = top + 2 * ow;
        T best = x[at];  // the first tap: taken unless -inf, which leaves -inf and it anyway
        for (const std::int64_t tap : {at + 1, at + in_width, at + in_width + 1}) {
          const T v = x[tap];
          const bool take = v > best || v != v;
          best = take ? v : best;
          at = take ? tap : at;
        }
        out[oh * width + ow] = best;
        if constexpr (kWithIndex) index[oh * width + ow] = at;
      }
    }
    return;
  }
  const auto& taps = pool.ranges;
  const auto clamp = [&](std::int64_t v, std::size_t d) {
    return std::clamp<std::int64_t>(v, 0, w.in[d] - 1);
  };
  for (const TapRange& td : taps[0]) {
    for (const TapRange& th : taps[1]) {
      const bool rows_inside = td.first < td.last && th.first < th.last;
      for (std::int64_t ow = 0; ow < width; ++ow) {
        out[ow] = -std::numeric_limits<T>::infinity();
        if constexpr (kWithIndex) {
          // All -inf: the first tap inside, as PyTorch; a window entirely in the padding
          // (possible with dilation) points at the nearest in-plane position.
          const TapRange& tw = taps[2][static_cast<std::size_t>(ow)];
          index[ow] = rows_inside && tw.first < tw.last
                          ? ((td.start + td.first * w.dilation[0]) * w.in[1] + th.start +
                             th.first * w.dilation[1]) *
                                    w.in[2] +
                                tw.start + tw.first * w.dilation[2]
                          : (clamp(td.start, 0) * w.in[1] + clamp(th.start, 1)) * w.in[2] +
                                clamp(tw.start, 2);
        }
      }
      for (std::int64_t kd = td.first; kd < td.last; ++kd) {
        const std::int64_t id = td.start + kd * w.dilation[0];
        for (std::int64_t kh = th.first; kh < th.last; ++kh) {
          const std::int64_t row = (id * w.in[1] + th.start + kh * w.dilation[1]) * w.in[2];
          for (const WTap& tap : pool.w_taps) {
            const std::int64_t base = row - w.padding[2] + tap.kw * w.dilation[2];
            const std::int64_t step = w.stride[2];
            for (std::int64_t ow = tap.first; ow < tap.last; ++ow) {
              const T v = x[base + ow * step];
              const bool take = v > out[ow] || v != v;
              out[ow] = take ? v : out[ow];
              if constexpr (kWithIndex) index[ow] = take ? base + ow * step : index[ow];
            }
          }
        }
      }
      out += width;
      if constexpr (kWithIndex) index += width;
    }
  }
}

// The adaptive window bounds of every output index along one dim.
std::vector<std::pair<std::int64_t, std::int64_t>> adaptive_bounds(std::int64_t in,
                                                                   std::int64_t out) {
  std::vector<std::pair<std::int64_t, std::int64_t>> bounds(static_cast<std::size_t>(out));
  for (std::int64_t i = 0; i < out; ++i) {
    bounds[static_cast<std::size_t>(i)] = {spatial::adaptive_start(i, in, out),
                                           spatial::adaptive_end(i, in, out)};
  }
  return bounds;
}

}  // namespace

Primitive CpuBackend::avg_pool(Primitive x, PoolOptions options) {
  const DType dtype = x->dtype();
  const Shape shape = x->shape();
  const Window w = pool_window(shape, options);
  const std::vector<WTap> columns = taps_along_w(w, 1);
  auto in = compute_input(*this, x);
  auto out = make_tensor(in->dtype(), with_spatial(shape, w.out));
  visit_compute(dtype, [&]<class T>(type_tag<T>) {
    const T* src = in->data_as<T>();
    T* dst = out->data_as<T>();
    for_each_plane(shape[0] * shape[1], plane_work(w), [&](std::int64_t p) {
      const T* plane = src + p * w.in_size();
      T* result = dst + p * w.out_size();
      // Each output row sums one kernel tap at a time across all its windows.
      for_each_avg_row<T>(w, options.count_include_pad,
                          [&](std::int64_t row, Span sd, Span sh, const detail::Buffer<T>& scale) {
                            T* o = result + row;
                            std::fill_n(o, w.out[2], T(0));
                            for (std::int64_t id = sd.begin; id < sd.end; ++id) {
                              for (std::int64_t ih = sh.begin; ih < sh.end; ++ih) {
                                const T* line = plane + (id * w.in[1] + ih) * w.in[2];
                                for (const WTap& tap : columns) {
                                  const T* at = line - w.padding[2] + tap.kw;
                                  for (std::int64_t ow = tap.first; ow < tap.last; ++ow)
                                    o[ow] += at[ow * w.stride[2]];
                                }
                              }
                            }
                            for (std::int64_t ow = 0; ow < w.out[2]; ++ow)
                              o[ow] *= scale[static_cast<std::size_t>(ow)];
                          });
    });
  });
  return from_compute(*this, out, dtype);
}

Primitive CpuBackend::avg_pool_backward(Primitive x, Primitive output_grad, PoolOptions options) {
  const DType dtype = x->dtype();
  const Shape shape = x->shape();
  const Window w = pool_window(shape, options);
  const std::vector<WTap> columns = taps_along_w(w, 1);
  auto dy = compute_input(*this, output_grad);
  auto out = make_tensor(dy->dtype(), shape);
  visit_compute(dtype, [&]<class T>(type_tag<T>) {
    const T* src = dy->data_as<T>();
    T* dst = out->data_as<T>();
    for_each_plane(shape[0] * shape[1], plane_work(w), [&](std::int64_t p) {
      const T* grad = src + p * w.out_size();
      T* plane = dst + p * w.in_size();
      std::fill_n(plane, w.in_size(), T(0));
      detail::Buffer<T> share(static_cast<std::size_t>(w.out[2]));
      for_each_avg_row<T>(w, options.count_include_pad,
                          [&](std::int64_t row, Span sd, Span sh, const detail::Buffer<T>& scale) {
                            for (std::size_t i = 0; i < share.size(); ++i)
                              share[i] = grad[row + static_cast<std::int64_t>(i)] * scale[i];
                            for (std::int64_t id = sd.begin; id < sd.end; ++id) {
                              for (std::int64_t ih = sh.begin; ih < sh.end; ++ih) {
                                T* line = plane + (id * w.in[1] + ih) * w.in[2];
                                for (const WTap& tap : columns) {
                                  T* at = line - w.padding[2] + tap.kw;
                                  for (std::int64_t ow = tap.first; ow < tap.last; ++ow)
                                    at[ow * w.stride[2]] += share[static_cast<std::size_t>(ow)];
                                }
                              }
                            }
                          });
    });
  });
  return from_compute(*this, out, dtype);
}

Primitive CpuBackend::max_pool(Primitive x, PoolOptions options) {
  const DType dtype = x->dtype();
  const Shape shape = x->shape();
  const Window w = pool_window(shape, options);
  const PoolTaps taps = pool_taps(w);
  auto in = compute_input(*this, x);
  auto out = make_tensor(in->dtype(), with_spatial(shape, w.out));
  visit_compute(dtype, [&]<class T>(type_tag<T>) {
    const T* src = in->data_as<T>();
    T* dst = out->data_as<T>();
    for_each_plane(shape[0] * shape[1], plane_work(w), [&](std::int64_t p) {
      max_pool_plane<false>(src + p * w.in_size(), w, taps, dst + p * w.out_size(),
                            static_cast<std::int64_t*>(nullptr));
    });
  });
  return from_compute(*this, out, dtype);
}

PrimitivePair CpuBackend::max_pool_with_indices(Primitive x, PoolOptions options,
                                                DType index_dtype) {
  const DType dtype = x->dtype();
  const Shape shape = x->shape();
  const Window w = pool_window(shape, options);
  const Shape out_shape = with_spatial(shape, w.out);
  const PoolTaps taps = pool_taps(w);
  auto in = compute_input(*this, x);
  auto out = make_tensor(in->dtype(), out_shape);
  auto indices = make_tensor(index_dtype, out_shape);
  // Checked before any work, so that an empty input reports a bad index dtype too.
  visit_int_dtype(index_dtype, "max_pool_with_indices", []<class I>(type_tag<I>) {});
  std::byte* idx = indices->data();
  const std::int64_t index_size = static_cast<std::int64_t>(dtype_size(index_dtype));
  visit_compute(dtype, [&]<class T>(type_tag<T>) {
    const T* src = in->data_as<T>();
    T* dst = out->data_as<T>();
    for_each_plane(shape[0] * shape[1], plane_work(w), [&](std::int64_t p) {
      std::byte* plane_indices = idx + p * w.out_size() * index_size;
      if (index_dtype == DType::I64) {  // the kernel's own index type: written in place
        max_pool_plane<true>(src + p * w.in_size(), w, taps, dst + p * w.out_size(),
                             reinterpret_cast<std::int64_t*>(plane_indices));
        return;
      }
      detail::Buffer<std::int64_t> plane_index(static_cast<std::size_t>(w.out_size()));
      max_pool_plane<true>(src + p * w.in_size(), w, taps, dst + p * w.out_size(),
                           plane_index.data());
      store_indices(plane_index.data(), w.out_size(), plane_indices, index_dtype);
    });
  });
  return {from_compute(*this, out, dtype), indices};
}

Primitive CpuBackend::max_pool_with_indices_backward(Primitive x, Primitive output_grad,
                                                     Primitive indices, PoolOptions options) {
  (void)options;  // the indices already say where every window's maximum was
  const DType dtype = x->dtype();
  const Shape shape = x->shape();
  const std::int64_t planes = shape[0] * shape[1];
  const std::int64_t plane_size = shape.num_elements() / std::max<std::int64_t>(1, planes);
  const std::int64_t grad_size =
      output_grad->shape().num_elements() / std::max<std::int64_t>(1, planes);
  auto dy = compute_input(*this, output_grad);
  auto index = contiguous(indices);
  auto out = make_tensor(dy->dtype(), shape);
  const DType index_dtype = index->dtype();
  visit_int_dtype(index_dtype, "max_pool_with_indices_backward", []<class I>(type_tag<I>) {});
  const std::byte* idx = index->data();
  const std::int64_t index_size = static_cast<std::int64_t>(dtype_size(index_dtype));
  visit_compute(dtype, [&]<class T>(type_tag<T>) {
    const T* src = dy->data_as<T>();
    T* dst = out->data_as<T>();
    for_each_plane(planes, grad_size + plane_size, [&](std::int64_t p) {
      T* plane = dst + p * plane_size;
      std::fill_n(plane, plane_size, T(0));
      detail::Buffer<std::int64_t> where(static_cast<std::size_t>(grad_size));
      load_indices(idx + p * grad_size * index_size, grad_size, index_dtype, where.data());
      const T* grad = src + p * grad_size;
      for (std::int64_t o = 0; o < grad_size; ++o) {
        const std::int64_t at = where[static_cast<std::size_t>(o)];
        if (at < 0 || at >= plane_size) {
          detail::fail<InvalidArgument>("max_pool_with_indices_backward", "index ", at,
                                        " is outside the plane of ", plane_size, " elements");
        }
        plane[at] += grad[o];
      }
    });
  });
  return from_compute(*this, out, dtype);
}

Primitive CpuBackend::adaptive_avg_pool(Primitive x, Axes output_size) {
  const DType dtype = x->dtype();
  const Shape shape = x->shape();
  const Dims3 in_size = spatial3(shape);
  const Dims3 out_size = align3(output_size, 1);
  auto in = compute_input(*this, x);
  auto out = make_tensor(in->dtype(), with_spatial(shape, out_size));
  // The window tables are sized by the output's extent: built only once the output exists, and
  // not at all for an empty batch (whose output size may be anything up to the tensor limit).
  if (out->shape().num_elements() == 0) return from_compute(*this, out, dtype);
  std::array<std::vector<std::pair<std::int64_t, std::int64_t>>, 3> bounds;
  for (std::size_t d = 0; d < 3; ++d) bounds[d] = adaptive_bounds(in_size[d], out_size[d]);
  visit_compute(dtype, [&]<class T>(type_tag<T>) {
    const T* src = in->data_as<T>();
    T* dst = out->data_as<T>();
    for_each_plane(
        shape[0] * shape[1], product3(in_size) + product3(out_size), [&](std::int64_t p) {
          const T* plane = src + p * product3(in_size);
          T* result = dst + p * product3(out_size);
          std::int64_t o = 0;
          for (const auto& [d0, d1] : bounds[0]) {
            for (const auto& [h0, h1] : bounds[1]) {
              for (const auto& [w0, w1] : bounds[2]) {
                double total = 0;
                for (std::int64_t id = d0; id < d1; ++id) {
                  for (std::int64_t ih = h0; ih < h1; ++ih) {
                    const T* row = plane + (id * in_size[1] + ih) * in_size[2];
                    for (std::int64_t iw = w0; iw < w1; ++iw) total += row[iw];
                  }
                }
                result[o++] =
                    static_cast<T>(total / static_cast<double>((d1 - d0) * (h1 - h0) * (w1 - w0)));
              }
            }
          }
        });
  });
  return from_compute(*this, out, dtype);
}

Primitive CpuBackend::adaptive_avg_pool_backward(Primitive x, Primitive output_grad) {
  const DType dtype = x->dtype();
  const Shape shape = x->shape();
  const Dims3 in_size = spatial3(shape);
  const Dims3 out_size = spatial3(output_grad->shape());
  auto dy = compute_input(*this, output_grad);
  auto out = make_tensor(dy->dtype(), shape);
  // Output sizes are at least 1, so an empty batch is the only empty case, on both sides.
  if (out->shape().num_elements() == 0) return from_compute(*this, out, dtype);
  std::array<std::vector<std::pair<std::int64_t, std::int64_t>>, 3> bounds;
  for (std::size_t d = 0; d < 3; ++d) bounds[d] = adaptive_bounds(in_size[d], out_size[d]);
  visit_compute(dtype, [&]<class T>(type_tag<T>) {
    const T* src = dy->data_as<T>();
    T* dst = out->data_as<T>();
    for_each_plane(
        shape[0] * shape[1], product3(in_size) + product3(out_size), [&](std::int64_t p) {
          const T* grad = src + p * product3(out_size);
          T* plane = dst + p * product3(in_size);
          std::fill_n(plane, product3(in_size), T(0));
          std::int64_t o = 0;
          for (const auto& [d0, d1] : bounds[0]) {
            for (const auto& [h0, h1] : bounds[1]) {
              for (const auto& [w0, w1] : bounds[2]) {
                const T g = grad[o++] / static_cast<T>((d1 - d0) * (h1 - h0) * (w1 - w0));
                for (std::int64_t id = d0; id < d1; ++id) {
                  for (std::int64_t ih = h0; ih < h1; ++ih) {
                    T* row = plane + (id * in_size[1] + ih) * in_size[2];
                    for (std::int64_t iw = w0; iw < w1; ++iw) row[iw] += g;
                  }
                }
              }
            }
          }
        });
  });
  return from_compute(*this, out, dtype);
}

}  // namespace kiln
