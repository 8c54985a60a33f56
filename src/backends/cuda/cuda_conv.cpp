// Convolution, its transpose and its weight gradient on the GPU, for f32, f16, bf16 and f64.
// Each op runs through cuDNN or kiln's own path below, as conv_route.cpp chooses per shape
// (conv_cudnn.h: KILN_CONV, the measured choice, what cuDNN cannot express). kiln's own path:
// generated im2col / col2im kernels (conv_source.h) around cuBLASLt products (lib/matmul.h,
// f32 accumulation for the 16-bit floats; f32 in full f32 unless the device allows tf32).
//   conv:            col = im2col(x); y[n, g] = W[g] · col[n, g]; y += bias (elementwise).
//                    A pointwise window (1x1, stride 1, no padding) reads x directly.
//   conv_transpose:  col[n, g] = W[g]^T · x[n, g]; y = col2im(col) + bias, one gather kernel
//                    (each output element sums its taps in a fixed order: deterministic).
//   conv_weight_backward: col = im2col(x) laid out [channel, tap, image, position]; one product
//                    per group dW[g] = dy[g] · col[g]^T over every image and position at once
//                    (dy seen as [channel, image * position]: a view when it is one, else a copy).
// conv_x_backward keeps the default (a conv_transpose, which lands here); conv_bias_backward
// the default sum. The column matrices live in one workspace from the caching allocator, at most
// kColumnBytes (whole images at a time; one image even when it is larger). The products batch
// over the images or the groups, whichever is more, and loop over the other on the host.
// Rows of the column matrices are padded to kAlign elements (aligned starts for cuBLASLt); when
// cuBLASLt has no algorithm for the alignment of a caller's view, the op reruns on padded copies.
// The 16-bit floats: the column matrix of conv_transpose holds the products rounded to the dtype
// before col2im sums them, and conv's bias is added after the product's rounding (the CPU
// computes both in f32 and rounds once): a few units in the last place more.
#include <algorithm>
#include <array>
#include <numeric>
#include <optional>

#include "backends/cuda/check.h"
#include "backends/cuda/conv_cudnn.h"
#include "backends/cuda/conv_source.h"
#include "backends/cuda/elementwise.h"
#include "backends/cuda/lib/matmul.h"
#include "backends/cuda/lib_call.h"
#include "contract/spatial_shape.h"

namespace kiln::cuda {

namespace {

using Dims3 = std::array<std::int64_t, 3>;

// The column workspace's size at most (whole images; at least one).
constexpr std::int64_t kColumnBytes = std::int64_t{512} << 20;
// Spatial coordinates are 32-bit in col2im: sizes and window parameters stay below this.
constexpr std::int64_t kMaxCoordinate = std::int64_t{1} << 30;

std::int64_t option(const std::vector<std::int64_t>& values, std::size_t i, std::int64_t fallback) {
  return i < values.size() ? values[i] : fallback;
}

// One sliding window, right-aligned into three spatial dims (leading ones of size 1): `in` is
// the image, `out` the grid of window positions; position o's tap j reads image position
// o * stride - padding + j * dilation.
struct Window {
  Dims3 in{1, 1, 1}, out{1, 1, 1}, kernel{1, 1, 1};
  Dims3 stride{1, 1, 1}, padding{0, 0, 0}, dilation{1, 1, 1};

  std::int64_t in_size() const { return in[0] * in[1] * in[2]; }
  std::int64_t out_size() const { return out[0] * out[1] * out[2]; }
  std::int64_t taps() const { return kernel[0] * kernel[1] * kernel[2]; }
  bool pointwise() const {
    for (std::size_t d = 0; d < 3; ++d) {
      if (kernel[d] != 1 || stride[d] != 1 || padding[d] != 0 || in[d] != out[d]) return false;
    }
    return true;
  }
};

// The window of conv(x, weight): x's spatial dims are the image.
Window conv_window(const Shape& x, const Shape& weight, const ConvOptions& o) {
  Window w;
  const std::size_t dims = x.rank() - 2, lead = 3 - dims;
  for (std::size_t i = 0; i < dims; ++i) {
    const std::size_t d = lead + i;
    w.in[d] = x[i + 2];
    w.kernel[d] = weight[i + 2];
    w.stride[d] = option(o.stride, i, 1);
    w.padding[d] = option(o.padding, i, 0);
    w.dilation[d] = option(o.dilation, i, 1);
    w.out[d] =
        spatial::conv_output_size(w.in[d], w.kernel[d], w.stride[d], w.padding[d], w.dilation[d]);
  }
  return w;
}

// The window of conv_transpose(x, weight): the transpose is the input gradient of a conv whose
// image is this op's output, so x's spatial dims are the window positions.
Window transpose_window(const Shape& x, const Shape& weight, const ConvTransposeOptions& o) {
  Window w;
  const std::size_t dims = x.rank() - 2, lead = 3 - dims;
  for (std::size_t i = 0; i < dims; ++i) {
    const std::size_t d = lead + i;
    w.out[d] = x[i + 2];
    w.kernel[d] = weight[i + 2];
    w.stride[d] = option(o.stride, i, 1);
    w.padding[d] = option(o.padding, i, 0);
    w.dilation[d] = option(o.dilation, i, 1);
    w.in[d] = spatial::conv_transpose_output_size(w.out[d], w.kernel[d], w.stride[d], w.padding[d],
                                                  w.dilation[d], option(o.padding_out, i, 0));
  }
  return w;
}

void check_window(const Window& w, const char* op) {
  bool fits = w.in_size() < kMaxCoordinate * 2 && w.out_size() < kMaxCoordinate * 2 &&
              w.taps() < kMaxCoordinate * 2;
  for (std::size_t d = 0; d < 3; ++d) {
    for (std::int64_t v : {w.in[d], w.out[d], w.kernel[d], w.stride[d], w.padding[d], w.dilation[d],
                           std::max<std::int64_t>(w.kernel[d] - 1, 0) * w.dilation[d]}) {
      if (v < 0 || v > kMaxCoordinate) fits = false;
    }
    if (w.stride[d] < 1 || w.dilation[d] < 1) fits = false;
  }
  if (!fits) {
    detail::fail<UnsupportedOperation>(op,
                                       "window sizes beyond 2^30 (or images and kernels of "
                                       "2^31 elements or more) are not supported on cuda");
  }
}

void check_float(DType dtype, const char* op) {
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16 && dtype != DType::F64) {
    detail::fail<UnsupportedDType>(op, "needs f32, f16, bf16 or f64 on cuda, got ",
                                   dtype_name(dtype));
  }
}

// [n, c, spatial...] with the given number of spatial dims (the last ones of the window).
Shape channels_first(std::int64_t n, std::int64_t c, const Dims3& spatial, std::size_t dims) {
  detail::DimVector out{n, c};
  for (std::size_t d = 3 - dims; d < 3; ++d) out.push_back(spatial[d]);
  return Shape(std::move(out));
}

// The stride of dims [first, rank) of t walked as one row-major index (the innermost stride),
// or nothing when they are not one run. Size-1 dims do not count; all of size 1: stride 1.
std::optional<std::int64_t> run_stride(const CudaTensor& t, std::size_t first) {
  std::int64_t stride = 1, span = 0;
  bool any = false;
  for (std::size_t d = t.rank(); d-- > first;) {
    const std::int64_t size = t.shape()[d];
    if (size == 1) continue;
    if (!any) {
      stride = t.strides()[d];
      span = stride * size;
      any = true;
    } else {
      if (t.strides()[d] != span) return std::nullopt;
      span *= size;
    }
  }
  return stride;
}

// Mirrors struct P of kIm2colParams (conv_source.h): same members, same order.
struct Im2colParams {
  std::int64_t total, positions, channels;
  std::int64_t x_n, x_c, x_s[3];
  std::int64_t col_n, col_c, col_k;
  std::int64_t in[3], out[3], kernel[3], stride[3], padding[3], dilation[3];
  std::uint64_t x, col;
};

// Mirrors struct P of kCol2imParams (conv_source.h): same members, same order.
struct Col2imParams {
  std::int64_t total, channels;
  std::int64_t col_n, col_c, col_k;
  std::int64_t in[3], out[3], kernel[3], stride[3], padding[3], dilation[3];
  std::int64_t kstep[3], ldelta[3];
  std::int64_t bias_stride;
  std::uint64_t col, bias, y;
};

// Element strides of a column matrix over image, channel and tap (window positions: 1).
struct ColumnStrides {
  std::int64_t n, c, k;
};

template <class P>
void copy_window(P& p, const Window& w) {
  for (std::size_t d = 0; d < 3; ++d) {
    p.in[d] = w.in[d];
    p.out[d] = w.out[d];
    p.kernel[d] = w.kernel[d];
    p.stride[d] = w.stride[d];
    p.padding[d] = w.padding[d];
    p.dilation[d] = w.dilation[d];
  }
}

// The columns of images [first, first + images) of x (any strides) into col.
void im2col(Runtime& runtime, const CudaTensor& x, std::int64_t first, std::int64_t images,
            const Window& w, CUdeviceptr col, const ColumnStrides& layout, const char* op) {
  Im2colParams p{};
  p.positions = w.out_size();
  p.channels = x.shape()[1];
  p.total = images * p.channels * p.positions;
  if (p.total == 0) return;
  p.x_n = x.strides()[0];
  p.x_c = x.strides()[1];
  const std::size_t dims = x.rank() - 2, lead = 3 - dims;
  for (std::size_t i = 0; i < dims; ++i) p.x_s[lead + i] = x.strides()[i + 2];
  p.col_n = layout.n;
  p.col_c = layout.c;
  p.col_k = layout.k;
  copy_window(p, w);
  p.x = reinterpret_cast<std::uintptr_t>(device_address(x, first * p.x_n));
  p.col = col;
  const DType dtype = x.dtype();
  const std::string key = std::string("conv_im2col:") + short_name(dtype);
  CUfunction function =
      runtime.compiler.function(key, "kiln_im2col", [&] { return im2col_source(dtype); });
  constexpr unsigned kBlock = 256;
  runtime.launch(op, function, runtime.blocks_for(p.total, kBlock), kBlock, p);
}

// y (contiguous [images, channels, in...]) = col2im of col (+ bias[c] when given).
void col2im(Runtime& runtime, DType dtype, CUdeviceptr col, std::int64_t images,
            std::int64_t channels, const ColumnStrides& layout, const Window& w,
            const CudaTensor* bias, CUdeviceptr y, const char* op) {
  Col2imParams p{};
  p.channels = channels;
  p.total = images * channels * w.in_size();
  if (p.total == 0) return;
  p.col_n = layout.n;
  p.col_c = layout.c;
  p.col_k = layout.k;
  copy_window(p, w);
  for (std::size_t d = 0; d < 3; ++d) {
    const std::int64_t g = std::gcd(w.stride[d], w.dilation[d]);
    p.kstep[d] = w.stride[d] / g;
    p.ldelta[d] = w.dilation[d] / g;
  }
  if (bias != nullptr) {
    p.bias = bias->data();
    p.bias_stride = bias->strides()[0];
  }
  p.col = col;
  p.y = y;
  const std::string key = std::string("conv_col2im:") + short_name(dtype);
  CUfunction function =
      runtime.compiler.function(key, "kiln_col2im", [&] { return col2im_source(dtype); });
  constexpr unsigned kBlock = 256;
  runtime.launch(op, function, runtime.blocks_for(p.total, kBlock), kBlock, p);
}

// One operand of the products below: matrix (i, j) of group g and image n at
//   base + g * per_group + n * per_image + i * row + j * col   (elements).
struct Operand {
  CUdeviceptr base;
  std::int64_t row, col, per_group, per_image;
};

// C[g, n] = A[g, n] · B[g, n] (m×k by k×n) for every group and image: one strided-batched
// cuBLASLt call per group batched over the images, or per image batched over the groups,
// whichever makes fewer calls.
class GroupedProduct {
 public:
  GroupedProduct(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t groups,
                 std::int64_t images, const Operand& a, const Operand& b, const Operand& c)
      : a_(a), b_(b), c_(c), groups_(groups), images_(images), esize_(dtype_size(dtype)) {
    by_images_ = images >= groups;
    desc_.dtype = dtype;
    desc_.m = m;
    desc_.n = n;
    desc_.k = k;
    desc_.batch = by_images_ ? images : groups;
    desc_.a = {a.row, a.col, by_images_ ? a.per_image : a.per_group};
    desc_.b = {b.row, b.col, by_images_ ? b.per_image : b.per_group};
    desc_.c = {c.row, c.col, by_images_ ? c.per_image : c.per_group};
  }

  // Whether cuBLASLt takes these layouts (batch offsets must not be negative).
  bool supported() const {
    for (const Operand* o : {&a_, &b_, &c_}) {
      if (o->per_group < 0 || o->per_image < 0) return false;
    }
    return lib::matmul_supported(desc_);
  }

  // Throws UnsupportedOperation when cuBLASLt has no algorithm (alignment of views).
  void run(Runtime& runtime, const char* op) const {
    const std::int64_t loops = by_images_ ? groups_ : images_;
    lib::MatmulDesc desc = desc_;
    desc.compute = product_compute(runtime, desc.dtype);
    cudaStream_t stream = lib_stream(runtime);
    for (std::int64_t i = 0; i < loops; ++i) {
      lib::matmul(desc, {address(a_, i), address(b_, i), address(c_, i)}, stream);
    }
    runtime.context.note_launch(op);
  }

 private:
  void* address(const Operand& o, std::int64_t i) const {
    const std::int64_t elements = i * (by_images_ ? o.per_group : o.per_image);
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(
        o.base + static_cast<CUdeviceptr>(elements * static_cast<std::int64_t>(esize_))));
  }

  Operand a_, b_, c_;
  std::int64_t groups_, images_;
  std::size_t esize_;
  bool by_images_ = true;
  lib::MatmulDesc desc_;
};

CUdeviceptr pointer_of(const Storage& s) { return s.pointer(); }

void zero_fill(Runtime& runtime, const CudaTensor& t, const char* op) {
  const std::size_t bytes =
      static_cast<std::size_t>(t.shape().num_elements()) * dtype_size(t.dtype());
  if (bytes == 0) return;
  runtime.context.make_current();
  KILN_CUDA_CHECK(op, cuMemsetD8Async(t.data(), 0, bytes, runtime.context.stream()));
  runtime.context.note_launch(op);
}

// Images per column workspace: at most kColumnBytes, at least one, at most `batch`.
std::int64_t images_per_chunk(std::int64_t per_image, DType dtype, std::int64_t batch) {
  const std::int64_t bytes =
      std::max<std::int64_t>(1, per_image * static_cast<std::int64_t>(dtype_size(dtype)));
  return std::clamp<std::int64_t>(kColumnBytes / bytes, 1, std::max<std::int64_t>(batch, 1));
}

std::size_t workspace_bytes(std::int64_t elements, DType dtype) {
  return static_cast<std::size_t>(std::max<std::int64_t>(elements, 1)) * dtype_size(dtype);
}

// Leading dimensions and block starts of the layouts this file owns are multiples of kAlign
// elements (16 bytes for the 16-bit floats), so every matrix cuBLASLt sees there starts aligned
// and the tensor-core kernels that need aligned rows stay available.
constexpr std::int64_t kAlign = 8;
std::int64_t round_up(std::int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// A fresh copy of t in which the first `lead` dims index rows of row_stride elements (each row
// holds the remaining dims, row-major): with row_stride a multiple of kAlign, every row starts
// aligned. Returns the view (it keeps the storage).
TensorPtr padded_copy(CudaBackend& backend, const CudaTensor& t, std::size_t lead,
                      std::int64_t row_stride, const char* op) {
  const Shape& shape = t.shape();
  std::int64_t count = 1;
  for (std::size_t d = 0; d < lead; ++d) count *= shape[d];
  TensorPtr storage =
      backend.make_tensor(t.dtype(), Shape{std::max<std::int64_t>(count * row_stride, 1)}, op);
  Strides strides(shape.rank());
  std::int64_t step = 1;
  for (std::size_t d = shape.rank(); d-- > lead;) {
    strides[d] = step;
    step *= shape[d];
  }
  step = row_stride;
  for (std::size_t d = lead; d-- > 0;) {
    strides[d] = step;
    step *= shape[d];
  }
  TensorPtr view = make_view(*storage, shape, std::move(strides), 0);
  backend.copy_into(*view, t, op);
  return view;
}

// Copies outer × inner blocks of `length` elements from the storage of src (blocks src_stride
// apart) to the storage of dst (blocks dst_stride apart); both are fresh tensors (offset 0).
void copy_blocks(CudaBackend& backend, const CudaTensor& dst, const CudaTensor& src,
                 std::int64_t outer, std::int64_t inner, std::int64_t length,
                 std::int64_t dst_stride, std::int64_t src_stride, const char* op) {
  const Shape shape{outer, inner, length};
  TensorPtr to = make_view(dst, shape, Strides{inner * dst_stride, dst_stride, 1}, 0);
  TensorPtr from = make_view(src, shape, Strides{inner * src_stride, src_stride, 1}, 0);
  backend.copy_into(*to, *from, op);
}

// The convolution cuDNN would run (conv_cudnn.h): its image x and windows' side y, the filter
// shape, the window's options; the operands are the caller's to set.
ConvProblem conv_problem(const char* op, ConvDirection direction, DType dtype, const Window& w,
                         const Shape& x_shape, const Shape& w_shape, const Shape& y_shape,
                         std::int64_t groups, const CudaTensor* bias) {
  ConvProblem p;
  p.op = op;
  p.direction = direction;
  p.dtype = dtype;
  p.x_shape = x_shape;
  p.w_shape = w_shape;
  p.y_shape = y_shape;
  for (std::size_t d = 3 - (x_shape.rank() - 2); d < 3; ++d) {
    p.stride.push_back(w.stride[d]);
    p.padding.push_back(w.padding[d]);
    p.dilation.push_back(w.dilation[d]);
  }
  p.groups = groups;
  p.bias = bias;
  return p;
}

}  // namespace

// y[n, c, ...] += bias[c] in place (y contiguous, bias any 1-d view).
void add_channel_bias(Runtime& runtime, const CudaTensor& y, const CudaTensor& bias,
                      const char* op) {
  detail::DimVector dims(y.rank(), 1);
  dims[1] = y.shape()[1];
  Strides strides(y.rank(), 0);
  strides[1] = bias.strides()[0];
  TensorPtr along = make_view(bias, Shape(std::move(dims)), std::move(strides), bias.offset());
  const DType d = y.dtype();
  ElementwiseOp spec{op, "a + b", {d, d}, d, d, {}, nullptr};
  const CudaTensor* inputs[] = {&y, along.get()};
  launch_elementwise(runtime, spec, y, inputs);
}

Primitive CudaBackend::conv(Primitive x, Primitive weight, OptionalPrimitive bias,
                            ConvOptions options) {
  const char* op = "conv";
  const DType dtype = x->dtype();
  check_float(dtype, op);
  const CudaTensor& xt = as_cuda(x);
  const Shape& xs = xt.shape();
  const Shape& ws = weight->shape();
  const Window w = conv_window(xs, ws, options);
  const std::int64_t batch = xs[0], in_channels = xs[1], out_channels = ws[0];
  const std::int64_t groups = options.groups;
  const std::int64_t in_per_group = in_channels / groups, out_per_group = out_channels / groups;
  const std::int64_t rows = in_per_group * w.taps(), positions = w.out_size();
  const Shape y_shape = channels_first(batch, out_channels, w.out, xs.rank() - 2);
  if (y_shape.num_elements() == 0) return make_tensor(dtype, y_shape, op);
  const CudaTensor* b = bias ? &as_cuda(*bias) : nullptr;
  ConvProblem problem =
      conv_problem(op, ConvDirection::Forward, dtype, w, xs, ws, y_shape, groups, b);
  problem.x = &xt;
  problem.w = &as_cuda(weight);
  // kiln's own path: y = W · im2col(x), then the bias.
  return convolve(*this, problem, [&]() -> TensorPtr {
    TensorPtr y = make_tensor(dtype, y_shape, op);
    check_window(w, op);
    if (rows == 0) {
      // Empty sums: the bias (or zeros) everywhere.
      zero_fill(runtime_, *y, op);
      if (b != nullptr) add_channel_bias(runtime_, *y, *b, op);
      return y;
    }

    // y[n, g] = W[g] (out_per_group × rows) · columns[n, g] (rows × positions). The weight's
    // rows are w_rows apart; c is where the product goes (y itself, or an aligned scratch).
    const std::size_t esize = dtype_size(dtype);
    auto product = [&](const CudaTensor& wt, std::int64_t w_rows, const Operand& columns,
                       const Operand& c, std::int64_t first, std::int64_t images) {
      const Operand a{wt.data(), w_rows, 1, out_per_group * w_rows, 0};
      Operand to = c;
      to.base += static_cast<CUdeviceptr>(first * c.per_image) * esize;
      return GroupedProduct(dtype, out_per_group, positions, rows, groups, images, a, columns, to);
    };
    auto run = [&](const CudaTensor& wt, std::int64_t w_rows, bool direct, const Operand& c) {
      // A pointwise window whose spatial dims are one run: the image is its own column matrix.
      if (direct) {
        if (const auto s = run_stride(xt, 2); s && w.pointwise()) {
          const Operand columns{xt.data(), xt.strides()[1], *s, in_per_group * xt.strides()[1],
                                xt.strides()[0]};
          const GroupedProduct p = product(wt, w_rows, columns, c, 0, batch);
          if (p.supported()) {
            try {
              p.run(runtime_, op);
              return;
            } catch (const UnsupportedOperation&) {
              // No algorithm for the view's alignment: through the columns (written in full).
            }
          }
        }
      }
      // Columns [image, channel, tap, position], rows ld elements apart.
      const std::int64_t ld = round_up(positions);
      const std::int64_t per_image = in_channels * w.taps() * ld;
      const std::int64_t chunk = images_per_chunk(per_image, dtype, batch);
      Workspace columns(runtime_, workspace_bytes(chunk * per_image, dtype), op);
      for (std::int64_t first = 0; first < batch; first += chunk) {
        const std::int64_t images = std::min(chunk, batch - first);
        im2col(runtime_, xt, first, images, w, pointer_of(columns), {per_image, w.taps() * ld, ld},
               op);
        const Operand cols{pointer_of(columns), ld, 1, rows * ld, per_image};
        product(wt, w_rows, cols, c, first, images).run(runtime_, op);
      }
    };
    TensorPtr wt = contiguous(weight, op);
    try {
      run(*wt, rows, true,
          {y->data(), positions, 1, out_per_group * positions, out_channels * positions});
    } catch (const UnsupportedOperation&) {
      // No cuBLASLt algorithm for the alignment of a view (the weight at an odd offset, a group's
      // block of y): once more with every matrix aligned (the weight copied with padded rows, the
      // product into a scratch whose group blocks start aligned, copied into y).
      const std::int64_t w_rows = round_up(rows), block = round_up(out_per_group * positions);
      TensorPtr padded = padded_copy(*this, *wt, 1, w_rows, op);
      TensorPtr scratch = make_tensor(dtype, Shape{batch * groups * block}, op);
      run(*padded, w_rows, false, {scratch->data(), positions, 1, block, groups * block});
      copy_blocks(*this, *y, *scratch, batch, groups, out_per_group * positions,
                  out_per_group * positions, block, op);
    }
    if (b != nullptr) add_channel_bias(runtime_, *y, *b, op);
    return y;
  });
}

Primitive CudaBackend::conv_transpose(Primitive x, Primitive weight, OptionalPrimitive bias,
                                      ConvTransposeOptions options) {
  const char* op = "conv_transpose";
  const DType dtype = x->dtype();
  check_float(dtype, op);
  const Shape& xs = x->shape();
  const Shape& ws = weight->shape();
  const Window w = transpose_window(xs, ws, options);
  const std::int64_t batch = xs[0], in_channels = xs[1], groups = options.groups;
  const std::int64_t in_per_group = in_channels / groups, out_per_group = ws[1];
  const std::int64_t out_channels = out_per_group * groups;
  const std::int64_t rows = out_per_group * w.taps(), positions = w.out_size();
  const Shape y_shape = channels_first(batch, out_channels, w.in, xs.rank() - 2);
  if (y_shape.num_elements() == 0) return make_tensor(dtype, y_shape, op);
  const CudaTensor* b = bias ? &as_cuda(*bias) : nullptr;
  // To cuDNN the output is the image and x the windows' side: the data gradient of a conv.
  ConvProblem problem =
      conv_problem(op, ConvDirection::BackwardData, dtype, w, y_shape, ws, xs, groups, b);
  problem.w = &as_cuda(weight);
  problem.y = &as_cuda(x);
  // kiln's own path: col2im(W^T · x) with the bias.
  return convolve(*this, problem, [&]() -> TensorPtr {
    TensorPtr y = make_tensor(dtype, y_shape, op);
    check_window(w, op);
    if (rows == 0 || in_per_group == 0 || positions == 0) {
      zero_fill(runtime_, *y, op);
      if (b != nullptr) add_channel_bias(runtime_, *y, *b, op);
      return y;
    }

    // columns[n, g] (rows × positions) = W[g]^T (rows × in_per_group) · x[n, g] (in_per_group ×
    // positions), then y = col2im(columns) + bias. Columns [image, channel, tap, position], rows
    // ld elements apart.
    const std::int64_t ld = round_up(positions);
    const std::int64_t per_image = out_channels * w.taps() * ld;
    const std::int64_t chunk = images_per_chunk(per_image, dtype, batch);
    Workspace columns(runtime_, workspace_bytes(chunk * per_image, dtype), op);
    const CUdeviceptr cols = pointer_of(columns);
    const std::size_t esize = dtype_size(dtype);
    // The weight's rows (per input channel) are w_rows apart.
    auto product = [&](const CudaTensor& wt, std::int64_t w_rows, const CudaTensor& xt,
                       std::int64_t first, std::int64_t images) {
      const std::optional<std::int64_t> s = run_stride(xt, 2);
      const Operand a{wt.data(), 1, w_rows, in_per_group * w_rows, 0};
      const Operand bx{xt.data() + static_cast<CUdeviceptr>(first * xt.strides()[0]) * esize,
                       xt.strides()[1], s.value_or(1), in_per_group * xt.strides()[1],
                       xt.strides()[0]};
      const Operand c{cols, ld, 1, rows * ld, per_image};
      return std::pair(
          GroupedProduct(dtype, rows, positions, in_per_group, groups, images, a, bx, c),
          s.has_value());
    };
    auto run = [&](const CudaTensor& wt, std::int64_t w_rows, const CudaTensor& xt) {
      for (std::int64_t first = 0; first < batch; first += chunk) {
        const std::int64_t images = std::min(chunk, batch - first);
        product(wt, w_rows, xt, first, images).first.run(runtime_, op);
        col2im(runtime_, dtype, cols, images, out_channels, {per_image, w.taps() * ld, ld}, w, b,
               y->data() + static_cast<CUdeviceptr>(first * out_channels * w.in_size()) * esize,
               op);
      }
    };
    TensorPtr wt = contiguous(weight, op);
    TensorPtr xt = std::static_pointer_cast<CudaTensor>(x);
    if (auto [p, one_run] = product(*wt, rows, *xt, 0, std::min(chunk, batch));
        !one_run || !p.supported()) {
      // x's spatial dims are not one run, or cuBLASLt does not take its layout: a padded copy.
      xt = padded_copy(*this, *xt, 2, ld, op);
    }
    try {
      run(*wt, rows, *xt);
    } catch (const UnsupportedOperation&) {
      // No cuBLASLt algorithm for the alignment of the views: copies of the weight and x whose
      // rows all start aligned. y is written in full again.
      const std::int64_t w_rows = round_up(rows);
      TensorPtr padded_w = padded_copy(*this, *wt, 1, w_rows, op);
      TensorPtr padded_x = padded_copy(*this, *xt, 2, ld, op);
      run(*padded_w, w_rows, *padded_x);
    }
    return y;
  });
}

Primitive CudaBackend::conv_weight_backward(Primitive x, Primitive weight, Primitive output_grad,
                                            ConvOptions options) {
  const char* op = "conv_weight_backward";
  const DType dtype = x->dtype();
  check_float(dtype, op);
  const CudaTensor& xt = as_cuda(x);
  const Shape& xs = xt.shape();
  const Shape ws = weight->shape();
  const Window w = conv_window(xs, ws, options);
  const std::int64_t batch = xs[0], in_channels = xs[1], out_channels = ws[0];
  const std::int64_t groups = options.groups;
  const std::int64_t in_per_group = in_channels / groups, out_per_group = out_channels / groups;
  const std::int64_t rows = in_per_group * w.taps(), positions = w.out_size();
  const Shape expected = channels_first(batch, out_channels, w.out, xs.rank() - 2);
  if (output_grad->shape() != expected) {
    detail::fail<InvalidArgument>(op, "output gradient of shape ", output_grad->shape().to_string(),
                                  ", expected ", expected.to_string());
  }
  if (ws.num_elements() == 0 || batch == 0 || positions == 0) {
    TensorPtr dw = make_tensor(dtype, ws, op);
    zero_fill(runtime_, *dw, op);  // empty sums
    return dw;
  }
  ConvProblem problem =
      conv_problem(op, ConvDirection::BackwardFilter, dtype, w, xs, ws, expected, groups, nullptr);
  problem.x = &xt;
  problem.y = &as_cuda(output_grad);
  // kiln's own path: dW = dy · im2col(x)^T per group.
  return convolve(*this, problem, [&]() -> TensorPtr {
    check_window(w, op);

    // dy as [out_channels, batch * positions]: the permuted view when images and positions walk
    // as one contiguous run, else a copy.
    Axes axes;
    axes.push_back(1);
    axes.push_back(0);
    for (std::int64_t d = 2; d < static_cast<std::int64_t>(xs.rank()); ++d) axes.push_back(d);
    TensorPtr dy = std::static_pointer_cast<CudaTensor>(permute(output_grad, axes));
    const std::int64_t run_elements = batch * positions;
    auto dy_usable = [&](const CudaTensor& t) {
      const std::optional<std::int64_t> s = run_stride(t, 1);
      return s && *s == 1 && t.strides()[0] >= 0 &&
             (out_channels == 1 || t.strides()[0] >= run_elements);
    };
    if (!dy_usable(*dy)) dy = padded_copy(*this, *dy, 1, round_up(run_elements), op);

    // Per chunk of images: columns [in_channels, taps, images · positions] (rows ld apart); then
    // per group dW[g] (out_per_group × rows) = dy[g] (out_per_group × images · positions) ·
    // columns[g]^T. Several chunks: one partial gradient each, summed at the end.
    const std::int64_t per_image = in_channels * w.taps() * positions;
    const std::int64_t chunk = images_per_chunk(per_image, dtype, batch);
    const std::int64_t chunks = (batch + chunk - 1) / chunk;
    const std::int64_t max_ld = round_up(chunk * positions);
    TensorPtr target = make_tensor(dtype, chunks == 1 ? ws : Shape{chunks, out_channels, rows}, op);
    Workspace columns(runtime_, workspace_bytes(in_channels * w.taps() * max_ld, dtype), op);
    const CUdeviceptr cols = pointer_of(columns);
    const std::size_t esize = dtype_size(dtype);
    // out: where chunk c's gradient of group g goes: out_base + (c * per_chunk + g * per_group)
    // elements, rows `rows` apart.
    auto run = [&](const CudaTensor& dyt, CUdeviceptr out_base, std::int64_t per_group,
                   std::int64_t per_chunk) {
      const std::int64_t dy_rows = dyt.strides()[0];
      for (std::int64_t c = 0; c < chunks; ++c) {
        const std::int64_t first = c * chunk, images = std::min(chunk, batch - first);
        const std::int64_t k = images * positions, ld = round_up(k);
        im2col(runtime_, xt, first, images, w, cols, {positions, w.taps() * ld, ld}, op);
        const Operand a{dyt.data() + static_cast<CUdeviceptr>(first * positions) * esize, dy_rows,
                        1, out_per_group * dy_rows, 0};
        const Operand bc{cols, 1, ld, rows * ld, 0};
        const Operand out{out_base + static_cast<CUdeviceptr>(c * per_chunk) * esize, rows, 1,
                          per_group, 0};
        GroupedProduct(dtype, out_per_group, rows, k, groups, 1, a, bc, out).run(runtime_, op);
      }
    };
    try {
      run(*dy, target->data(), out_per_group * rows, out_channels * rows);
    } catch (const UnsupportedOperation&) {
      // No cuBLASLt algorithm for the alignment of dy's view or of a group's block of the
      // gradient: dy copied with aligned rows, the products into a scratch whose group blocks
      // start aligned, copied into the gradient.
      TensorPtr padded = padded_copy(*this, *dy, 1, round_up(batch * positions), op);
      const std::int64_t block = round_up(out_per_group * rows);
      TensorPtr scratch = make_tensor(dtype, Shape{chunks * groups * block}, op);
      run(*padded, scratch->data(), block, groups * block);
      copy_blocks(*this, *target, *scratch, chunks, groups, out_per_group * rows,
                  out_per_group * rows, block, op);
    }
    if (chunks == 1) return target;
    return std::static_pointer_cast<CudaTensor>(reshape(sum_dim(target, 0), ws));
  });
}

}  // namespace kiln::cuda
