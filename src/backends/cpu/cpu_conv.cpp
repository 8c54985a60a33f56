// Convolution and its transpose over 1-3 spatial dims, and the gradients of convolution.
// Per batch image and group: the window's column matrix is built into a reused buffer (im2col)
// and one gemm does the arithmetic; the transpose and the input gradient run the gemm first and
// scatter the columns back (col2im). Pointwise windows (1x1, stride 1) skip the column matrix.
// The gemm is OpenBLAS's, already multi-threaded, so images run one after another.
#include "backend/spatial_shape.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/spatial.h"

namespace kiln {

using namespace cpu;

namespace {

// [n, c, spatial...] keeping the shape's own number of spatial dims.
Shape channels_first(std::int64_t n, std::int64_t c, const Dims3& spatial, std::size_t dims) {
  detail::DimVector out{n, c};
  for (std::size_t d = 3 - dims; d < 3; ++d) out.push_back(spatial[d]);
  return Shape(std::move(out));
}

// The window of a convolution of image x by weight (its kernel in dims 2..).
Window conv_window(const Shape& x, const Shape& weight, const ConvOptions& o) {
  Window w;
  w.in = spatial3(x);
  w.kernel = spatial3(weight);
  w.stride = align3(o.stride, 1);
  w.padding = align3(o.padding, 0);
  w.dilation = align3(o.dilation, 1);
  for (std::size_t d = 0; d < 3; ++d) {
    w.out[d] = spatial::conv_output_size(w.in[d], w.kernel[d], w.stride[d], w.padding[d],
                                         w.dilation[d]);
  }
  return w;
}

// The sizes every convolution kernel below needs.
struct ConvSizes {
  std::int64_t batch;
  std::int64_t groups;
  std::int64_t in_per_group;   // image channels per group
  std::int64_t out_per_group;  // output channels per group
  std::int64_t rows;           // in_per_group * kernel taps: rows of one group's column matrix
};

// A scratch column matrix from the caching allocator, or nothing for pointwise windows.
template <class T>
std::shared_ptr<CpuTensor> column_buffer(const Window& w, std::int64_t rows) {
  if (w.is_pointwise()) return nullptr;
  return make_tensor(dtype_of_v<T>, Shape{rows * w.out_size()});
}

// y[n, c, :] += bias[c] on contiguous [batch, channels, plane] data.
template <class T>
void add_bias(T* y, const T* bias, std::int64_t batch, std::int64_t channels, std::int64_t plane) {
  const std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(1, plane));
  parallel_for(batch * channels, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const T b = bias[i % channels];
      T* row = y + i * plane;
      for (std::int64_t j = 0; j < plane; ++j) row[j] += b;
    }
  });
}

template <class T>
void conv_forward(const T* x, const T* weight, const T* bias, T* y, const ConvSizes& s,
                  const Window& w) {
  const std::int64_t image = w.in_size(), plane = w.out_size();
  const std::int64_t in_channels = s.in_per_group * s.groups;
  const std::int64_t out_channels = s.out_per_group * s.groups;
  const std::shared_ptr<CpuTensor> buffer = column_buffer<T>(w, s.rows);
  for (std::int64_t n = 0; n < s.batch; ++n) {
    for (std::int64_t g = 0; g < s.groups; ++g) {
      const T* xg = x + (n * in_channels + g * s.in_per_group) * image;
      const T* columns = xg;
      if (buffer) {
        im2col(xg, s.in_per_group, w, buffer->data_as<T>());
        columns = buffer->data_as<T>();
      }
      gemm<T>(false, false, s.out_per_group, plane, s.rows, T(1),
              weight + g * s.out_per_group * s.rows, s.rows, columns, plane, T(0),
              y + (n * out_channels + g * s.out_per_group) * plane, plane);
    }
    if (bias != nullptr) add_bias(y + n * out_channels * plane, bias, 1, out_channels, plane);
  }
}

// dx = col2im(weight^T dy) per image and group.
template <class T>
void conv_input_grad(const T* weight, const T* dy, T* dx, const ConvSizes& s, const Window& w) {
  const std::int64_t image = w.in_size(), plane = w.out_size();
  const std::int64_t in_channels = s.in_per_group * s.groups;
  const std::int64_t out_channels = s.out_per_group * s.groups;
  const std::shared_ptr<CpuTensor> buffer = column_buffer<T>(w, s.rows);
  for (std::int64_t n = 0; n < s.batch; ++n) {
    for (std::int64_t g = 0; g < s.groups; ++g) {
      T* dxg = dx + (n * in_channels + g * s.in_per_group) * image;
      T* columns = buffer ? buffer->data_as<T>() : dxg;
      gemm<T>(true, false, s.rows, plane, s.out_per_group, T(1),
              weight + g * s.out_per_group * s.rows, s.rows,
              dy + (n * out_channels + g * s.out_per_group) * plane, plane, T(0), columns, plane);
      if (buffer) col2im(columns, s.in_per_group, w, dxg);
    }
  }
}

// dweight = sum over images of dy im2col(x)^T, per group.
template <class T>
void conv_weight_grad(const T* x, const T* dy, T* dweight, const ConvSizes& s, const Window& w) {
  const std::int64_t image = w.in_size(), plane = w.out_size();
  const std::int64_t in_channels = s.in_per_group * s.groups;
  const std::int64_t out_channels = s.out_per_group * s.groups;
  if (s.batch == 0) std::fill_n(dweight, out_channels * s.rows, T(0));
  const std::shared_ptr<CpuTensor> buffer = column_buffer<T>(w, s.rows);
  for (std::int64_t n = 0; n < s.batch; ++n) {
    for (std::int64_t g = 0; g < s.groups; ++g) {
      const T* xg = x + (n * in_channels + g * s.in_per_group) * image;
      const T* columns = xg;
      if (buffer) {
        im2col(xg, s.in_per_group, w, buffer->data_as<T>());
        columns = buffer->data_as<T>();
      }
      gemm<T>(false, true, s.out_per_group, s.rows, plane, T(1),
              dy + (n * out_channels + g * s.out_per_group) * plane, plane, columns, plane,
              n == 0 ? T(0) : T(1), dweight + g * s.out_per_group * s.rows, s.rows);
    }
  }
}

ConvSizes conv_sizes(const Shape& x, const Shape& weight, std::int64_t groups, const Window& w) {
  const std::int64_t in_per_group = x[1] / groups;
  return {x[0], groups, in_per_group, weight[0] / groups, in_per_group * w.kernel_size()};
}

}  // namespace

Primitive CpuBackend::conv(Primitive x, Primitive weight, OptionalPrimitive bias,
                           ConvOptions options) {
  const DType dtype = x->dtype();
  const Shape xs = x->shape(), ws = weight->shape();
  const Window w = conv_window(xs, ws, options);
  const ConvSizes s = conv_sizes(xs, ws, options.groups, w);
  auto xin = compute_input(*this, x);
  auto win = compute_input(*this, weight);
  auto bin = bias ? compute_input(*this, *bias) : nullptr;
  auto out = make_tensor(xin->dtype(), channels_first(xs[0], ws[0], w.out, xs.rank() - 2));
  visit_compute(dtype, [&]<class T>(type_tag<T>) {
    conv_forward<T>(xin->data_as<T>(), win->data_as<T>(), bin ? bin->data_as<T>() : nullptr,
                    out->data_as<T>(), s, w);
  });
  return from_compute(*this, out, dtype);
}

Primitive CpuBackend::conv_x_backward(Primitive x, Primitive weight, Primitive output_grad,
                                      ConvOptions options) {
  const DType dtype = x->dtype();
  const Shape xs = x->shape(), ws = weight->shape();
  const Window w = conv_window(xs, ws, options);
  const ConvSizes s = conv_sizes(xs, ws, options.groups, w);
  auto win = compute_input(*this, weight);
  auto dy = compute_input(*this, output_grad);
  auto out = make_tensor(win->dtype(), xs);
  visit_compute(dtype, [&]<class T>(type_tag<T>) {
    conv_input_grad<T>(win->data_as<T>(), dy->data_as<T>(), out->data_as<T>(), s, w);
  });
  return from_compute(*this, out, dtype);
}

Primitive CpuBackend::conv_weight_backward(Primitive x, Primitive weight, Primitive output_grad,
                                           ConvOptions options) {
  const DType dtype = x->dtype();
  const Shape xs = x->shape(), ws = weight->shape();
  const Window w = conv_window(xs, ws, options);
  const ConvSizes s = conv_sizes(xs, ws, options.groups, w);
  auto xin = compute_input(*this, x);
  auto dy = compute_input(*this, output_grad);
  auto out = make_tensor(xin->dtype(), ws);
  visit_compute(dtype, [&]<class T>(type_tag<T>) {
    conv_weight_grad<T>(xin->data_as<T>(), dy->data_as<T>(), out->data_as<T>(), s, w);
  });
  return from_compute(*this, out, dtype);
}

Primitive CpuBackend::conv_bias_backward(Primitive output_grad) {
  const DType dtype = output_grad->dtype();
  const Shape shape = output_grad->shape();
  const std::int64_t batch = shape[0], channels = shape[1];
  const std::int64_t plane = shape.num_elements() / std::max<std::int64_t>(1, batch * channels);
  auto dy = compute_input(*this, output_grad);
  auto out = make_tensor(dy->dtype(), Shape{channels});
  visit_compute(dtype, [&]<class T>(type_tag<T>) {
    const T* g = dy->data_as<T>();
    T* o = out->data_as<T>();
    const std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(1, batch * plane));
    parallel_for(channels, grain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t c = begin; c < end; ++c) {
        double total = 0;  // f64 accumulator: sums over batch * plane terms stay accurate
        for (std::int64_t n = 0; n < batch; ++n) {
          const T* row = g + (n * channels + c) * plane;
          for (std::int64_t j = 0; j < plane; ++j) total += static_cast<double>(row[j]);
        }
        o[c] = static_cast<T>(total);
      }
    });
  });
  return from_compute(*this, out, dtype);
}

Primitive CpuBackend::conv_transpose(Primitive x, Primitive weight, OptionalPrimitive bias,
                                     ConvTransposeOptions options) {
  const DType dtype = x->dtype();
  const Shape xs = x->shape(), ws = weight->shape();
  // The transpose is the input gradient of a convolution whose image is this op's output.
  Window w;
  w.out = spatial3(xs);
  w.kernel = spatial3(ws);
  w.stride = align3(options.stride, 1);
  w.padding = align3(options.padding, 0);
  w.dilation = align3(options.dilation, 1);
  const Dims3 padding_out = align3(options.padding_out, 0);
  for (std::size_t d = 0; d < 3; ++d) {
    w.in[d] = spatial::conv_transpose_output_size(w.out[d], w.kernel[d], w.stride[d],
                                                  w.padding[d], w.dilation[d], padding_out[d]);
  }
  const std::int64_t groups = options.groups;
  const std::int64_t out_per_group = ws[1];
  const ConvSizes s{xs[0], groups, out_per_group, xs[1] / groups, out_per_group * w.kernel_size()};
  auto xin = compute_input(*this, x);
  auto win = compute_input(*this, weight);
  auto bin = bias ? compute_input(*this, *bias) : nullptr;
  auto out = make_tensor(xin->dtype(), channels_first(xs[0], out_per_group * groups, w.in, xs.rank() - 2));
  visit_compute(dtype, [&]<class T>(type_tag<T>) {
    conv_input_grad<T>(win->data_as<T>(), xin->data_as<T>(), out->data_as<T>(), s, w);
    if (bin) add_bias(out->data_as<T>(), bin->data_as<T>(), xs[0], out_per_group * groups, w.in_size());
  });
  return from_compute(*this, out, dtype);
}

}  // namespace kiln
