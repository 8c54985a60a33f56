// layer_norm (a DEFAULT op) as one generated kernel (norm.h). Its gradient stays autodiff's rule.
#include <fmt/format.h>

#include <algorithm>

#include "backends/cuda/elementwise_ops.h"
#include "backends/cuda/env_switch.h"
#include "backends/cuda/kernel_source.h"
#include "backends/cuda/norm.h"

namespace kiln::cuda {

Primitive CudaBackend::layer_norm(Primitive x, Primitive gamma, OptionalPrimitive beta,
                                  double epsilon) {
  const char* op = "layer_norm";
  check_accepts(x->dtype(), Accepts::Float, op);
  check_accepts(gamma->dtype(), Accepts::Float, op);
  if (beta) check_accepts((*beta)->dtype(), Accepts::Float, op);
  // The tensor layer has checked the shapes (gamma and beta of x's last dim) and promoted the
  // dtypes.
  const Shape& shape = x->shape();
  const std::int64_t width = shape[shape.rank() - 1];
  TensorPtr in = contiguous(x, op);
  TensorPtr out = make_tensor(x->dtype(), shape, op);
  if (shape.num_elements() == 0) return out;
  const CudaTensor& g = as_cuda(gamma);
  const DType beta_dtype = beta ? (*beta)->dtype() : g.dtype();
  LayerNormParams p{};
  p.rows = shape.num_elements() / width;
  p.width = width;
  p.gamma_stride = g.strides()[0];
  p.beta_stride = beta ? as_cuda(*beta).strides()[0] : 0;
  p.x = in->data();
  p.out = out->data();
  p.gamma = g.data();
  p.beta = beta ? as_cuda(*beta).data() : 0;
  p.epsilon = epsilon;
  const std::string dtypes = std::string(short_name(x->dtype())) + ":" + short_name(g.dtype()) +
                             ":" + short_name(beta_dtype);
  const auto aligned16 = [](std::uint64_t address) { return address % 16 == 0; };
  const bool params_aligned = dtype_size(g.dtype()) == dtype_size(x->dtype()) &&
                              p.gamma_stride == 1 && aligned16(p.gamma) &&
                              (!beta || (dtype_size(beta_dtype) == dtype_size(x->dtype()) &&
                                         p.beta_stride == 1 && aligned16(p.beta)));
  const LayerNormRows rows =
      layer_norm_rows(x->dtype(), width, aligned16(p.x) && aligned16(p.out), params_aligned);
  const std::int64_t sms = runtime().context.sm_count();
  if (rows.fits()) {
    const std::string key = fmt::format("layer_norm_rows:{}:{}:{}:{}:{}", dtypes, rows.vector,
                                        rows.chunks, rows.threads_per_row, rows.vector_params);
    CUfunction function = runtime().compiler.function(key, "kiln_layer_norm_rows", [&] {
      return layer_norm_rows_source(x->dtype(), g.dtype(), beta_dtype, rows);
    });
    const std::int64_t rows_per_block = rows.block / rows.threads_per_row;
    const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(
        (p.rows + rows_per_block - 1) / rows_per_block, sms * std::max(1, 2048 / rows.block)));
    runtime().launch(op, function, blocks, static_cast<unsigned>(rows.block), p);
    return out;
  }
  CUfunction function = runtime().compiler.function("layer_norm:" + dtypes, "kiln_layer_norm", [&] {
    return layer_norm_source(x->dtype(), g.dtype(), beta_dtype);
  });
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(p.rows, sms * 16));
  runtime().launch(op, function, blocks, 256, p);
  return out;
}

// KILN_CUDA_LAYER_NORM_BACKWARD=0 runs the default's composition instead (for comparisons).
PrimitivePair CudaBackend::layer_norm_backward(Primitive x, Primitive gamma, Primitive grad,
                                               double epsilon) {
  const char* op = "layer_norm_backward";
  static const bool enabled = on_unless_zero("KILN_CUDA_LAYER_NORM_BACKWARD");
  const Shape shape = x->shape();
  const std::int64_t width = shape[shape.rank() - 1];
  if (!enabled || shape.num_elements() == 0) {
    return Backend::layer_norm_backward(std::move(x), std::move(gamma), std::move(grad), epsilon);
  }
  check_accepts(x->dtype(), Accepts::Float, op);
  // The tensor layer has checked the shapes and promoted the three to one dtype.
  const DType dtype = x->dtype();
  const DType xg_dtype = dtype == DType::F64 ? DType::F64 : DType::F32;
  TensorPtr in = contiguous(x, op);
  TensorPtr g = contiguous(grad, op);
  const CudaTensor& gam = as_cuda(gamma);
  TensorPtr dx = make_tensor(dtype, shape, op);
  const std::int64_t rows = shape.num_elements() / width;
  TensorPtr xg = make_tensor(xg_dtype, Shape{rows, width}, op);
  LayerNormBackwardParams p{};
  p.rows = rows;
  p.width = width;
  p.gamma_stride = gam.strides()[0];
  p.x = in->data();
  p.grad = g->data();
  p.gamma = gam.data();
  p.dx = dx->data();
  p.xg = xg->data();
  p.epsilon = epsilon;
  CUfunction function = runtime().compiler.function(
      std::string("layer_norm_backward:") + short_name(dtype), "kiln_layer_norm_backward",
      [&] { return layer_norm_backward_source(dtype); });
  constexpr unsigned kBlock = 256, kRowsPerBlock = kBlock / 32;
  const std::int64_t sms = runtime().context.sm_count();
  const auto blocks = static_cast<unsigned>(
      std::min<std::int64_t>((rows + kRowsPerBlock - 1) / kRowsPerBlock, sms * 16));
  runtime().launch(op, function, blocks, kBlock, p);
  Primitive dgamma = reshape(sum_dim(std::move(xg), 0), Shape{width});
  if (dgamma->dtype() != dtype) dgamma = cast(std::move(dgamma), dtype);
  return {std::move(dx), std::move(dgamma)};
}

}  // namespace kiln::cuda
