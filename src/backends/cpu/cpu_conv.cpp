// Convolution and its transpose over 1-3 spatial dims, and the gradients of convolution.
// The work is split into independent tasks (image, group, block of window positions or of
// channels), spread over kiln's threads; each task builds its block of the column matrix in a
// per-thread buffer that stays in cache (im2col) and runs one single-threaded gemm on it. The
// transpose and the input gradient run the gemm first and scatter the columns back (col2im).
// Pointwise windows (1x1, stride 1, no padding) read the image directly. In builds with oneDNN,
// f32 convolutions go to its primitives first (cpu_conv_dnnl.cpp); these kernels take the rest.

#include <mutex>

#include "backends/cpu/conv_dnnl.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/spatial.h"
#include "contract/spatial_shape.h"

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
    w.out[d] =
        spatial::conv_output_size(w.in[d], w.kernel[d], w.stride[d], w.padding[d], w.dilation[d]);
  }
  return w;
}

// Bytes of one task's column block at most. Wide blocks keep the gemm efficient (OpenBLAS
// slows down on narrow ones); this cap bounds the per-thread scratch and keeps the block in a
// cache level above memory between im2col and the gemm that reads it.
constexpr std::int64_t kColumnBytes = std::int64_t{2} << 20;

// While alive (and engaged), OpenBLAS runs single-threaded: the kernels below split the work
// over kiln's threads and call gemm from each, and a pthreads OpenBLAS would otherwise
// oversubscribe the cores (its pool spinning against kiln's) and serialise concurrent calls.
// Nested or concurrent scopes share one saved setting.
class SingleThreadedBlas {
 public:
  explicit SingleThreadedBlas(bool engage) {
    if (!engage || openblas_get_parallel() == 0) return;
    std::lock_guard lock(mutex());
    if (depth()++ == 0) {
      saved() = openblas_get_num_threads();
      openblas_set_num_threads(1);
    }
    engaged_ = true;
  }
  ~SingleThreadedBlas() {
    if (!engaged_) return;
    std::lock_guard lock(mutex());
    if (--depth() == 0) openblas_set_num_threads(saved());
  }
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static int& depth() {
    static int d = 0;
    return d;
  }
  static int& saved() {
    static int s = 1;
    return s;
  }
  bool engaged_ = false;
};

// Runs task(t, scratch) for t in [0, tasks) over kiln's threads; each thread gets its own
// scratch of scratch_size elements, prepared by begin(scratch) and handed to end(scratch) after
// its last task. work: multiply-adds of one task (small totals stay on one thread).
template <class T, class Begin, class Task, class End>
void run_tasks(std::int64_t tasks, std::int64_t work, std::int64_t scratch_size, Begin&& begin,
               Task&& task, End&& end) {
  const std::int64_t grain =
      std::max<std::int64_t>(1, kConvSerialWork / std::max<std::int64_t>(1, work));
  const bool parallel =
      !in_parallel_region() && std::min<std::int64_t>(thread_count(), tasks / grain) > 1;
  SingleThreadedBlas blas(parallel);
  parallel_for(tasks, grain, [&](std::int64_t first, std::int64_t last) {
    std::shared_ptr<CpuTensor> storage;
    if (scratch_size > 0) storage = make_tensor(dtype_of_v<T>, Shape{scratch_size});
    T* scratch = storage ? storage->data_as<T>() : nullptr;
    begin(scratch);
    for (std::int64_t t = first; t < last; ++t) task(t, scratch);
    end(scratch);
  });
}
template <class T, class Task>
void run_tasks(std::int64_t tasks, std::int64_t work, std::int64_t scratch_size, Task&& task) {
  run_tasks<T>(
      tasks, work, scratch_size, [](T*) {}, std::forward<Task>(task), [](T*) {});
}

// How many of `count` units (window positions, channels) one task takes: blocks of equal size,
// each of at most kColumnBytes (at `unit_bytes` a unit) unless that is below `minimum` units,
// and enough of them for two tasks per thread over `images` images.
std::int64_t block_size(std::int64_t count, std::int64_t unit_bytes, std::int64_t images,
                        std::int64_t minimum) {
  if (count <= 0) return 1;
  const std::int64_t cap = std::max(minimum, kColumnBytes / std::max<std::int64_t>(1, unit_bytes));
  const std::int64_t for_threads = ceil_div(2 * thread_count(), std::max<std::int64_t>(1, images));
  std::int64_t pieces = std::max(ceil_div(count, cap), for_threads);
  pieces = std::clamp<std::int64_t>(pieces, 1, std::max<std::int64_t>(1, count / minimum));
  return ceil_div(count, pieces);
}

// y[n, c, :] += bias[c] on contiguous [batch, channels, plane] data.
template <class T>
void add_bias(T* y, const T* bias, std::int64_t batch, std::int64_t channels, std::int64_t plane) {
  const std::int64_t grain =
      std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(1, plane));
  parallel_for(batch * channels, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const T b = bias[i % channels];
      T* row = y + i * plane;
      for (std::int64_t j = 0; j < plane; ++j) row[j] += b;
    }
  });
}

// Tasks over (image, group, block of window positions): im2col of the block into the thread's
// scratch, then one gemm writes the block of every output channel of the group.
template <class T>
void conv_forward(const T* x, const T* weight, const T* bias, T* y, const ConvSizes& s,
                  const Window& w) {
#if KILN_HAVE_DNNL
  if constexpr (std::is_same_v<T, float>) {
    if (dnnl_conv_forward(x, weight, bias, y, s, w)) return;
  }
#endif
  const std::int64_t image = w.in_size(), plane = w.out_size();
  const std::int64_t in_channels = s.in_per_group * s.groups;
  const std::int64_t out_channels = s.out_per_group * s.groups;
  const bool pointwise = w.is_pointwise();
  const std::int64_t chunk =
      block_size(plane, s.rows * static_cast<std::int64_t>(sizeof(T)), s.batch * s.groups, 32);
  const std::int64_t chunks = ceil_div(plane, chunk);
  run_tasks<T>(s.batch * s.groups * chunks, s.out_per_group * s.rows * chunk,
               pointwise ? 0 : s.rows * chunk, [&](std::int64_t t, T* columns) {
                 const std::int64_t n = t / (s.groups * chunks), g = (t / chunks) % s.groups;
                 const std::int64_t first = (t % chunks) * chunk,
                                    last = std::min(plane, first + chunk);
                 const T* xg = x + (n * in_channels + g * s.in_per_group) * image;
                 const T* b = xg + first;
                 std::int64_t ldb = plane;
                 if (!pointwise) {
                   im2col_block(xg, s.in_per_group, w, first, last, columns);
                   b = columns;
                   ldb = last - first;
                 }
                 T* yg = y + (n * out_channels + g * s.out_per_group) * plane + first;
                 gemm<T>(false, false, s.out_per_group, last - first, s.rows, T(1),
                         weight + g * s.out_per_group * s.rows, s.rows, b, ldb, T(0), yg, plane);
                 if (bias == nullptr) return;
                 for (std::int64_t c = 0; c < s.out_per_group; ++c) {
                   const T value = bias[g * s.out_per_group + c];
                   T* row = yg + c * plane;
                   for (std::int64_t j = 0; j < last - first; ++j) row[j] += value;
                 }
               });
}

// dx = col2im(weight^T dy), in tasks over (image, group, block of image channels): col2im of
// different channels writes disjoint planes, so tasks never race.
template <class T>
void conv_input_grad(const T* weight, const T* dy, T* dx, const ConvSizes& s, const Window& w) {
#if KILN_HAVE_DNNL
  if constexpr (std::is_same_v<T, float>) {
    if (dnnl_conv_input_grad(weight, dy, dx, s, w)) return;
  }
#endif
  const std::int64_t image = w.in_size(), plane = w.out_size(), taps = w.kernel_size();
  const std::int64_t in_channels = s.in_per_group * s.groups;
  const std::int64_t out_channels = s.out_per_group * s.groups;
  const bool pointwise = w.is_pointwise();
  const std::int64_t block = block_size(
      s.in_per_group, taps * plane * static_cast<std::int64_t>(sizeof(T)), s.batch * s.groups, 1);
  const std::int64_t blocks = ceil_div(s.in_per_group, block);
  run_tasks<T>(s.batch * s.groups * blocks, s.out_per_group * block * taps * plane,
               pointwise ? 0 : block * taps * plane, [&](std::int64_t t, T* columns) {
                 const std::int64_t n = t / (s.groups * blocks), g = (t / blocks) % s.groups;
                 const std::int64_t c0 = (t % blocks) * block,
                                    c1 = std::min(s.in_per_group, c0 + block);
                 T* dxg = dx + (n * in_channels + g * s.in_per_group + c0) * image;
                 gemm<T>(true, false, (c1 - c0) * taps, plane, s.out_per_group, T(1),
                         weight + g * s.out_per_group * s.rows + c0 * taps, s.rows,
                         dy + (n * out_channels + g * s.out_per_group) * plane, plane, T(0),
                         pointwise ? dxg : columns, plane);
                 if (!pointwise) col2im_block(columns, c1 - c0, w, dxg);
               });
}

// dweight = sum over images of dy im2col(x)^T. Small gradients (up to kPartialBytes, and all
// the copies within kAllPartialsBytes): tasks over (image, group, block of window positions),
// each thread summing into its own copy of the gradient, added up at the end. Larger ones:
// tasks over (group, block of input channels), each owning its columns of the gradient and
// looping over the images.
constexpr std::int64_t kPartialBytes = std::int64_t{4} << 20;
constexpr std::int64_t kAllPartialsBytes = std::int64_t{256} << 20;

template <class T>
void conv_weight_grad(const T* x, const T* dy, T* dweight, const ConvSizes& s, const Window& w) {
#if KILN_HAVE_DNNL
  if constexpr (std::is_same_v<T, float>) {
    if (dnnl_conv_weight_grad(x, dy, dweight, s, w)) return;
  }
#endif
  const std::int64_t image = w.in_size(), plane = w.out_size(), taps = w.kernel_size();
  const std::int64_t in_channels = s.in_per_group * s.groups;
  const std::int64_t out_channels = s.out_per_group * s.groups;
  const std::int64_t total = out_channels * s.rows;
  std::fill_n(dweight, total, T(0));
  const bool pointwise = w.is_pointwise();
  // One gemm: dweight[group rows, c0 * taps...] += dy[n, group][:, first:last] columns^T.
  const auto accumulate = [&](std::int64_t n, std::int64_t g, std::int64_t c0, std::int64_t c1,
                              std::int64_t first, std::int64_t last, T* columns, T* target) {
    const T* xg = x + (n * in_channels + g * s.in_per_group + c0) * image;
    const T* b = xg + first;
    std::int64_t ldb = plane;
    if (!pointwise) {
      im2col_block(xg, c1 - c0, w, first, last, columns);
      b = columns;
      ldb = last - first;
    }
    gemm<T>(false, true, s.out_per_group, (c1 - c0) * taps, last - first, T(1),
            dy + (n * out_channels + g * s.out_per_group) * plane + first, plane, b, ldb, T(1),
            target + g * s.out_per_group * s.rows + c0 * taps, s.rows);
  };
  const std::int64_t bytes = total * static_cast<std::int64_t>(sizeof(T));
  if (bytes <= kPartialBytes && thread_count() * bytes <= kAllPartialsBytes) {
    const std::int64_t chunk =
        block_size(plane, s.rows * static_cast<std::int64_t>(sizeof(T)), s.batch * s.groups, 32);
    const std::int64_t chunks = ceil_div(plane, chunk);
    const std::int64_t columns_size = pointwise ? 0 : s.rows * chunk;
    std::mutex mutex;
    run_tasks<T>(
        s.batch * s.groups * chunks, s.out_per_group * s.rows * chunk, columns_size + total,
        [&](T* scratch) { std::fill_n(scratch + columns_size, total, T(0)); },
        [&](std::int64_t t, T* scratch) {
          const std::int64_t n = t / (s.groups * chunks), g = (t / chunks) % s.groups;
          const std::int64_t first = (t % chunks) * chunk;
          accumulate(n, g, 0, s.in_per_group, first, std::min(plane, first + chunk), scratch,
                     scratch + columns_size);
        },
        [&](T* scratch) {
          std::lock_guard lock(mutex);
          const T* partial = scratch + columns_size;
          for (std::int64_t i = 0; i < total; ++i) dweight[i] += partial[i];
        });
    return;
  }
  const std::int64_t block =
      block_size(s.in_per_group, taps * plane * static_cast<std::int64_t>(sizeof(T)), s.groups, 1);
  const std::int64_t blocks = ceil_div(s.in_per_group, block);
  const std::int64_t chunk = std::clamp<std::int64_t>(
      kColumnBytes / std::max<std::int64_t>(1, block * taps * static_cast<std::int64_t>(sizeof(T))),
      32, std::max<std::int64_t>(plane, 1));
  run_tasks<T>(
      s.groups * blocks, s.batch * s.out_per_group * block * taps * plane,
      pointwise ? 0 : block * taps * chunk, [&](std::int64_t t, T* columns) {
        const std::int64_t g = t / blocks;
        const std::int64_t c0 = (t % blocks) * block, c1 = std::min(s.in_per_group, c0 + block);
        for (std::int64_t n = 0; n < s.batch; ++n) {
          for (std::int64_t first = 0; first < plane; first += chunk) {
            accumulate(n, g, c0, c1, first, std::min(plane, first + chunk), columns, dweight);
          }
        }
      });
}

ConvSizes conv_sizes(const Shape& x, const Shape& weight, std::int64_t groups, const Window& w) {
  const std::int64_t in_per_group = x[1] / groups;
  return {x[0],
          groups,
          in_per_group,
          weight[0] / groups,
          in_per_group * w.kernel_size(),
          static_cast<std::int64_t>(x.rank()) - 2};
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
    const std::int64_t grain =
        std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(1, batch * plane));
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
    w.in[d] = spatial::conv_transpose_output_size(w.out[d], w.kernel[d], w.stride[d], w.padding[d],
                                                  w.dilation[d], padding_out[d]);
  }
  const std::int64_t groups = options.groups;
  const std::int64_t out_per_group = ws[1];
  const ConvSizes s{xs[0],
                    groups,
                    out_per_group,
                    xs[1] / groups,
                    out_per_group * w.kernel_size(),
                    static_cast<std::int64_t>(xs.rank()) - 2};
  auto xin = compute_input(*this, x);
  auto win = compute_input(*this, weight);
  auto bin = bias ? compute_input(*this, *bias) : nullptr;
  auto out =
      make_tensor(xin->dtype(), channels_first(xs[0], out_per_group * groups, w.in, xs.rank() - 2));
  visit_compute(dtype, [&]<class T>(type_tag<T>) {
    conv_input_grad<T>(win->data_as<T>(), xin->data_as<T>(), out->data_as<T>(), s, w);
    if (bin)
      add_bias(out->data_as<T>(), bin->data_as<T>(), xs[0], out_per_group * groups, w.in_size());
  });
  return from_compute(*this, out, dtype);
}

}  // namespace kiln
