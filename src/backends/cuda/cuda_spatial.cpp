// Pooling and interpolation as generated kernels (spatial.h): the window geometry of the CPU
// backend (pool_window, adaptive bounds, interpolation taps) filled into one parameter block.
#include <array>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernel_source.h"
#include "backends/cuda/spatial.h"
#include "contract/spatial_shape.h"

namespace kiln::cuda {

namespace {

using Dims3 = std::array<std::int64_t, 3>;

// Right-aligns values (at most three) into three, the rest being fill (the CPU's align3).
Dims3 align3(const std::vector<std::int64_t>& values, std::int64_t fill) {
  Dims3 out{fill, fill, fill};
  const std::size_t lead = 3 - values.size();
  for (std::size_t i = 0; i < values.size(); ++i) out[lead + i] = values[i];
  return out;
}

Dims3 spatial3(const Shape& shape) {
  return align3(std::vector<std::int64_t>(shape.dims().begin() + 2, shape.dims().end()), 1);
}

// Strides (N, C, d, h, w) of a channels-first tensor with 1-3 spatial dims; 0 for the missing.
void strides5(const CudaTensor& t, std::int64_t* s) {
  const std::size_t spatial = t.rank() - 2;
  s[0] = t.strides()[0];
  s[1] = t.strides()[1];
  for (std::size_t d = 0; d < 3; ++d) {
    const std::size_t lead = 3 - spatial;
    s[2 + d] = d < lead ? 0 : t.strides()[2 + d - lead];
  }
}

Shape with_spatial(const Shape& x, const Dims3& spatial) {
  detail::DimVector out{x[0], x[1]};
  for (std::size_t d = 3 - (x.rank() - 2); d < 3; ++d) out.push_back(spatial[d]);
  return Shape(std::move(out));
}

void set3(std::int64_t* to, const Dims3& from) {
  for (std::size_t d = 0; d < 3; ++d) to[d] = from[d];
}

// The CPU's pool_window as launch parameters (in, out, kernel, stride, padding, dilation).
Dims3 pool_window(SpatialParams& p, const Shape& x, const PoolOptions& o) {
  const Dims3 in = spatial3(x), kernel = align3(o.kernel_size, 1), stride = align3(o.stride, 1),
              padding = align3(o.padding, 0), dilation = align3(o.dilation, 1);
  Dims3 out{};
  for (std::size_t d = 0; d < 3; ++d) {
    out[d] = spatial::pool_output_size(in[d], kernel[d], stride[d], padding[d], dilation[d],
                                       o.ceil_mode);
  }
  set3(p.in, in);
  set3(p.out, out);
  set3(p.kernel, kernel);
  set3(p.stride, stride);
  set3(p.padding, padding);
  set3(p.dilation, dilation);
  p.count_include_pad = o.count_include_pad ? 1 : 0;
  p.channels = x[1];
  return out;
}

DType compute_dtype(DType dtype) { return dtype == DType::F64 ? DType::F64 : DType::F32; }

void check_float(DType dtype, const char* op) {
  if (!is_float(dtype)) {
    detail::fail<UnsupportedDType>(op, "dtype ", dtype_name(dtype), " is not accepted");
  }
}

void launch_spatial(CudaBackend& backend, SpatialKernel kernel, DType dtype, DType index_dtype,
                    InterpolateMode mode, SpatialParams& p, std::int64_t items) {
  if (items <= 0) return;
  Runtime& rt = backend.runtime();
  const char* op = spatial_kernel_name(kernel);
  p.n = items;
  p.error_word = rt.context.error_word();
  if (kernel == SpatialKernel::MaxPoolBackward) {  // the only one that can fail
    p.error_token = rt.context.error_token(op, "index outside the plane");
  }
  const std::string key = std::string("spatial:") + op + ":" + short_name(dtype) + ":" +
                          short_name(index_dtype) + ":" + std::to_string(static_cast<int>(mode));
  CUfunction f = rt.compiler.function(
      key, "kiln_spatial", [&] { return spatial_source(kernel, dtype, index_dtype, mode); });
  rt.launch(op, f, rt.blocks_for(items, 256), 256, p);
}

// A zeroed contiguous tensor (the accumulation buffer of the atomic gradients).
TensorPtr zeroed(CudaBackend& backend, DType dtype, const Shape& shape, const char* op) {
  TensorPtr t = backend.make_tensor(dtype, shape, op);
  const std::size_t bytes = static_cast<std::size_t>(shape.num_elements()) * dtype_size(dtype);
  if (bytes == 0) return t;
  Runtime& rt = backend.runtime();
  rt.context.make_current();
  KILN_CUDA_CHECK(op, cuMemsetD8Async(t->data(), 0, bytes, rt.context.stream()));
  rt.context.note_launch(op);
  return t;
}

}  // namespace

Primitive CudaBackend::avg_pool(Primitive x, PoolOptions options) {
  check_float(x->dtype(), "avg_pool");
  const CudaTensor& t = as_cuda(x);
  SpatialParams p{};
  const Dims3 out = pool_window(p, t.shape(), options);
  TensorPtr result = make_tensor(t.dtype(), with_spatial(t.shape(), out), "avg_pool");
  strides5(t, p.xs);
  p.x = t.data();
  p.out_ptr = result->data();
  launch_spatial(*this, SpatialKernel::AvgPool, t.dtype(), DType::I64, InterpolateMode::Nearest, p,
                 result->shape().num_elements());
  return result;
}

Primitive CudaBackend::avg_pool_backward(Primitive x, Primitive output_grad, PoolOptions options) {
  check_float(x->dtype(), "avg_pool_backward");
  const CudaTensor& g = as_cuda(output_grad);
  SpatialParams p{};
  pool_window(p, x->shape(), options);
  set3(p.out, spatial3(g.shape()));  // the gradient's own extent (the same by the op contract)
  TensorPtr result = make_tensor(g.dtype(), x->shape(), "avg_pool_backward");
  strides5(g, p.gs);
  p.g = g.data();
  p.out_ptr = result->data();
  launch_spatial(*this, SpatialKernel::AvgPoolBackward, g.dtype(), DType::I64,
                 InterpolateMode::Nearest, p, result->shape().num_elements());
  return result;
}

PrimitivePair CudaBackend::max_pool_with_indices(Primitive x, PoolOptions options,
                                                 DType index_dtype) {
  check_float(x->dtype(), "max_pool_with_indices");
  if (!is_int(index_dtype)) {
    detail::fail<UnsupportedDType>("max_pool_with_indices", "index dtype ", dtype_name(index_dtype),
                                   " is not an integer dtype");
  }
  const CudaTensor& t = as_cuda(x);
  SpatialParams p{};
  const Dims3 out = pool_window(p, t.shape(), options);
  const Shape out_shape = with_spatial(t.shape(), out);
  TensorPtr result = make_tensor(t.dtype(), out_shape, "max_pool_with_indices");
  TensorPtr indices = make_tensor(index_dtype, out_shape, "max_pool_with_indices");
  strides5(t, p.xs);
  p.x = t.data();
  p.out_ptr = result->data();
  p.idx = indices->data();
  launch_spatial(*this, SpatialKernel::MaxPool, t.dtype(), index_dtype, InterpolateMode::Nearest, p,
                 out_shape.num_elements());
  return {result, indices};
}

Primitive CudaBackend::max_pool_with_indices_backward(Primitive x, Primitive output_grad,
                                                      Primitive indices, PoolOptions options) {
  (void)options;  // the indices already say where every window's maximum was
  const char* op = "max_pool_with_indices_backward";
  check_float(x->dtype(), op);
  if (!is_int(indices->dtype())) {
    detail::fail<UnsupportedDType>(op, "indices must have an integer dtype, got ",
                                   dtype_name(indices->dtype()));
  }
  const CudaTensor& g = as_cuda(output_grad);
  const CudaTensor& idx = as_cuda(indices);
  const DType dtype = g.dtype();
  SpatialParams p{};
  set3(p.in, spatial3(x->shape()));
  set3(p.out, spatial3(g.shape()));
  p.channels = x->shape()[1];
  strides5(g, p.gs);
  strides5(idx, p.is);
  TensorPtr sum = zeroed(*this, compute_dtype(dtype), x->shape(), op);
  p.g = g.data();
  p.idx = idx.data();
  p.out_ptr = sum->data();
  launch_spatial(*this, SpatialKernel::MaxPoolBackward, dtype, idx.dtype(),
                 InterpolateMode::Nearest, p, g.shape().num_elements());
  if (sum->dtype() == dtype) return sum;
  return cast(sum, dtype);
}

Primitive CudaBackend::adaptive_avg_pool(Primitive x, Axes output_size) {
  check_float(x->dtype(), "adaptive_avg_pool");
  const CudaTensor& t = as_cuda(x);
  SpatialParams p{};
  const Dims3 out = align3(output_size, 1);
  set3(p.in, spatial3(t.shape()));
  set3(p.out, out);
  p.channels = t.shape()[1];
  TensorPtr result = make_tensor(t.dtype(), with_spatial(t.shape(), out), "adaptive_avg_pool");
  strides5(t, p.xs);
  p.x = t.data();
  p.out_ptr = result->data();
  launch_spatial(*this, SpatialKernel::AdaptiveAvgPool, t.dtype(), DType::I64,
                 InterpolateMode::Nearest, p, result->shape().num_elements());
  return result;
}

Primitive CudaBackend::adaptive_avg_pool_backward(Primitive x, Primitive output_grad) {
  check_float(x->dtype(), "adaptive_avg_pool_backward");
  const CudaTensor& g = as_cuda(output_grad);
  SpatialParams p{};
  set3(p.in, spatial3(x->shape()));
  set3(p.out, spatial3(g.shape()));
  p.channels = x->shape()[1];
  TensorPtr result = make_tensor(g.dtype(), x->shape(), "adaptive_avg_pool_backward");
  strides5(g, p.gs);
  p.g = g.data();
  p.out_ptr = result->data();
  launch_spatial(*this, SpatialKernel::AdaptiveAvgPoolBackward, g.dtype(), DType::I64,
                 InterpolateMode::Nearest, p, result->shape().num_elements());
  return result;
}

Primitive CudaBackend::interpolate(Primitive x, Axes output_size, InterpolateOptions options) {
  check_float(x->dtype(), "interpolate");
  const CudaTensor& t = as_cuda(x);
  const Shape& shape = t.shape();
  SpatialParams p{};
  set3(p.in, {1, shape[2], shape[3]});
  set3(p.out, {1, output_size[0], output_size[1]});
  p.channels = shape[1];
  p.align_corners = options.align_corners ? 1 : 0;
  TensorPtr result = make_tensor(
      t.dtype(), Shape{shape[0], shape[1], output_size[0], output_size[1]}, "interpolate");
  strides5(t, p.xs);
  p.x = t.data();
  p.out_ptr = result->data();
  launch_spatial(*this, SpatialKernel::Interpolate, t.dtype(), DType::I64, options.mode, p,
                 result->shape().num_elements());
  return result;
}

Primitive CudaBackend::interpolate_backward(Primitive x, Primitive output_grad, Axes output_size,
                                            InterpolateOptions options) {
  const char* op = "interpolate_backward";
  check_float(x->dtype(), op);
  const CudaTensor& g = as_cuda(output_grad);
  const Shape& shape = x->shape();
  const DType dtype = g.dtype();
  SpatialParams p{};
  set3(p.in, {1, shape[2], shape[3]});
  set3(p.out, {1, output_size[0], output_size[1]});
  p.channels = shape[1];
  p.align_corners = options.align_corners ? 1 : 0;
  strides5(g, p.gs);
  TensorPtr sum = zeroed(*this, compute_dtype(dtype), shape, op);
  p.g = g.data();
  p.out_ptr = sum->data();
  launch_spatial(*this, SpatialKernel::InterpolateBackward, dtype, DType::I64, options.mode, p,
                 shape[0] * shape[1] * output_size[0] * output_size[1]);
  if (sum->dtype() == dtype) return sum;
  return cast(sum, dtype);
}

}  // namespace kiln::cuda
