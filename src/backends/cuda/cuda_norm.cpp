// layer_norm (a DEFAULT op) as one generated kernel (norm.h). Its gradient stays autodiff's rule.
#include <fmt/format.h>

#include <algorithm>

#include "backends/cuda/elementwise_ops.h"
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

}  // namespace kiln::cuda
